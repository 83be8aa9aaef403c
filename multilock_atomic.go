package distlock

import (
	"context"
	"time"

	"github.com/distlock/distlock/backend"
)

// acquireAtOnce takes every key in one request where l's backend can
// (backend.MultiAcquirer), as Leases made by the one lease machinery, and
// reports false when it did not — for any reason: AcquireAll then takes
// the keys one by one, which reports errors, waits, and tells observers.
func (l *Locker) acquireAtOnce(ctx context.Context, keys []string, opts []Option) ([]*Lease, bool) {
	ma, ok := l.drv.(backend.MultiAcquirer)
	if !ok || len(keys) < 2 {
		return nil, false
	}
	rs := make([]request, len(keys))
	for i, k := range keys {
		r, err := l.prepare(k, opts)
		if err != nil || r.observer() != nil {
			return nil, false
		}
		rs[i] = r
	}
	if l.begin() != nil {
		return nil, false
	}
	defer l.inflight.Done()
	leases := make([]*Lease, len(keys))
	reqs := make([]backend.Request, len(keys))
	for i := range rs {
		leases[i] = newLease(l, &rs[i])
		reqs[i] = backend.Request{Key: keys[i], Owner: rs[i].owner, TTL: rs[i].ttl, Metadata: rs[i].metadata(), Lost: leases[i].backendLost}
	}
	sent := time.Now()
	locks, err := ma.TryAcquireAll(ctx, reqs)
	if err != nil {
		return nil, false
	}
	for i, lock := range locks {
		at := sent
		if is, ok := lock.(backend.Issued); ok {
			at = is.IssuedAt()
		}
		if i >= len(leases) || !leases[i].start(lock, at, rs[i].minHold()) {
			// Late, or Close ran: give everything back, in the
			// background (Close waits for it, within its bound).
			started := leases[:min(i, len(leases))]
			rest := locks[i:]
			l.inflight.Add(1)
			go func() {
				defer l.inflight.Done()
				_ = releaseAll(boundedRelease(context.Background()), started, (*Lease).abandon)
				for _, lk := range rest {
					l.releaseQuietly(lk)
				}
			}()
			return nil, false
		}
		l.owned.granted(keys[i], rs[i].owner)
	}
	if len(locks) < len(leases) {
		_ = releaseAll(boundedRelease(context.Background()), leases[:len(locks)], (*Lease).abandon)
		return nil, false
	}
	return leases, true
}
