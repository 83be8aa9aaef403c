package memcached

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock/backend"
)

// lingerMark starts the pseudo-hold that keeps a lock taken after a hold
// was released within its minimum hold (distlock.WithMinHold): "~" and
// the Unix millisecond, by the releasing client's clock, until which the
// lock stays taken by its owner. Hold ids are base64url and never start
// with "~", so no Release or Refresh can match it.
const lingerMark = "~"

// lingerMs is the moment the record's minimum hold ends, 0 if it has none.
func (r *record) lingerMs() int64 {
	for _, h := range r.holds {
		if ms, ok := strings.CutPrefix(h, lingerMark); ok {
			v, _ := strconv.ParseInt(ms, 10, 64)
			return v
		}
	}
	return 0
}

// liveHolds counts the holds of leases, the linger mark excluded.
func (r *record) liveHolds() int {
	n := len(r.holds)
	if r.lingerMs() != 0 {
		n--
	}
	return n
}

// withLinger returns holds with the linger mark set to untilMs (or
// dropped when untilMs is 0).
func withLinger(holds []string, untilMs int64) []string {
	out := make([]string, 0, len(holds)+1)
	for _, h := range holds {
		if !strings.HasPrefix(h, lingerMark) {
			out = append(out, h)
		}
	}
	if untilMs != 0 {
		out = append(out, lingerMark+strconv.FormatInt(untilMs, 10))
	}
	return out
}

// ReleaseAfter implements backend.DelayedReleaser: it removes the lease's
// hold and keeps the lock taken by its owner until dur from now, never less
// (rounded up to memcached's seconds plus two ticks). Owner-checked like
// Release: ErrNotHeld if the hold is gone. A lost reply is not undone:
// either outcome leaves a lock that expires.
func (d *driver) ReleaseAfter(ctx context.Context, bl backend.Lock, dur time.Duration) error {
	l, ok := bl.(*lock)
	if !ok || l.d != d {
		return fmt.Errorf("%w: not a lock of this Locker", backend.ErrNotHeld)
	}
	_, err := call(d, ctx, func(ctx context.Context) (struct{}, error) {
		err := d.lingerHold(ctx, l.key, l.holdRef, dur)
		if d.freshRetry(ctx, err) {
			// A "not held" now may be the first attempt's success.
			if err2 := d.lingerHold(ctx, l.key, l.holdRef, dur); !errors.Is(err2, backend.ErrNotHeld) {
				err = err2
			}
		}
		return struct{}{}, shape(err)
	}, nil)
	return err
}

// lingerHold swaps h's hold for the linger mark, owner-checked.
func (d *driver) lingerHold(ctx context.Context, key string, h holdRef, dur time.Duration) error {
	return d.rewrite(ctx, key, h, func(it *memcache.Item, cur record) (bool, error) {
		now := time.Now().UnixMilli()
		until := max(cur.lingerMs(), now+dur.Milliseconds())
		cur.holds = withLinger(cur.without(h.hold), until)
		if cur.liveHolds() == 0 {
			cur.expMs = until // the leases are over: the minimum hold decides
		} else {
			cur.expMs = max(cur.expMs, until)
		}
		it.Value, it.Expiration = cur.encode(), holdSeconds(cur.expMs, now)
		return casOutcome(d.cas(ctx, it))
	})
}
