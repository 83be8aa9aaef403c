package distlock

import (
	"context"
	"fmt"
	"time"
)

// minHoldLeft is how long the lease's minimum hold (WithMinHold) lasts yet,
// 0 when it has none or it has passed.
func (ls *Lease) minHoldLeft() time.Duration {
	if ls.minHoldEnd == 0 {
		return 0
	}
	return max(ls.minHoldEnd-time.Since(epoch), 0)
}

// epoch is the origin of Lease.minHoldEnd; it carries a monotonic reading.
var epoch = time.Now()

// holdOut is Release within the minimum hold: the lease has ended; the
// lock stays taken for left more. An Expiring lock is set to expire then
// (backend.DelayedReleaser), or refreshed to at least then, so that the
// server keeps it whatever this process does next; a
// session-bound one is released by the Locker when left has passed, or at
// once when the Locker closes.
func (ls *Lease) holdOut(ctx context.Context, left time.Duration) error {
	if ls.l.caps.Expiring {
		ttl := ls.l.coveringTTL(left)
		var err error
		if ls.l.delayed != nil {
			err = ls.l.delayed.ReleaseAfter(ctx, ls.lock, ttl)
		} else {
			err = ls.lock.Refresh(ctx, ttl)
		}
		return ls.releaseErr(err)
	}
	lock := ls.lock
	go func() {
		t := time.NewTimer(left)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ls.l.closeCtx.Done():
		}
		rctx, cancel := context.WithTimeout(context.Background(), releaseLimit())
		defer cancel()
		_ = lock.Release(rctx) // ErrNotHeld: the session ended first, the lock with it
	}()
	return nil
}

// giveBack frees the lock of a lease that Close ended: at once, or on an
// Expiring backend within the minimum hold, when the hold ends (holdOut:
// the server keeps it; no process needs to stay up).
func (ls *Lease) giveBack(ctx context.Context) error {
	if left := ls.minHoldLeft(); left > 0 && ls.l.caps.Expiring {
		return ls.holdOut(ctx, left)
	}
	return ls.lock.Release(ctx)
}

// checkMinHold refuses, at acquisition, a minimum hold that an Expiring
// backend could not keep with the one refresh (or delayed release) that
// Release makes within it, such as more than memcached's 30 days.
func (l *Locker) checkMinHold(d time.Duration) error {
	if d == 0 || !l.caps.Expiring {
		return nil
	}
	if _, err := l.validityFor(l.coveringTTL(d)); err != nil {
		return fmt.Errorf("%w: WithMinHold(%v): longer than %s can keep a lock (%v)", ErrInvalidOption, d, l.name, err)
	}
	return nil
}

// coveringTTL is the shortest TTL of at least d that the backend honours
// exactly: d itself, else d rounded up to whole seconds (coarse server
// clocks), else the backend's minimum if it is below a few seconds.
func (l *Locker) coveringTTL(d time.Duration) time.Duration {
	secs := (d + time.Second - 1).Truncate(time.Second)
	for _, ttl := range []time.Duration{d, secs, max(secs, 2*time.Second), max(secs, 5*time.Second)} {
		if _, err := l.validityFor(ttl); err == nil {
			return ttl
		}
	}
	return max(secs, 5*time.Second)
}
