package conformance

import (
	"context"
	"slices"

	"github.com/distlock/distlock"
)

// take is how a worker process takes what its configuration names: the
// lock of Key, a permit of the semaphore of Key (Permits), or all of three
// of Keys (AcquireAll).
type take struct {
	keys    func(seq int) []string
	acquire func(ctx context.Context, keys []string) ([]*distlock.Lease, func(context.Context) error, error)
}

func taker(l *distlock.Locker, cfg workerConfig) (take, error) {
	opt := distlock.WithTTL(cfg.TTL)
	one := func(string) []string { return []string{cfg.Key} }
	single := func(lease *distlock.Lease, err error) ([]*distlock.Lease, func(context.Context) error, error) {
		if err != nil {
			return nil, nil, err
		}
		return []*distlock.Lease{lease}, lease.Release, nil
	}
	switch {
	case len(cfg.Keys) > 0:
		return take{
			keys: func(seq int) []string { return multiSet(cfg.Keys, cfg.ID, seq) },
			acquire: func(ctx context.Context, keys []string) ([]*distlock.Lease, func(context.Context) error, error) {
				m, err := l.AcquireAll(ctx, keys, opt)
				if err != nil {
					return nil, nil, err
				}
				return m.Leases(), m.Release, nil
			},
		}, nil
	case cfg.Permits > 0:
		sem, err := l.Semaphore(cfg.Key, cfg.Permits)
		if err != nil {
			return take{}, err
		}
		return take{keys: func(int) []string { return one("") }, acquire: func(ctx context.Context, _ []string) ([]*distlock.Lease, func(context.Context) error, error) {
			return single(sem.Acquire(ctx, opt))
		}}, nil
	}
	return take{keys: func(int) []string { return one("") }, acquire: func(ctx context.Context, _ []string) ([]*distlock.Lease, func(context.Context) error, error) {
		return single(l.Acquire(ctx, cfg.Key, opt))
	}}, nil
}

// multiSet picks up to 3 of keys for a worker's seq-th AcquireAll:
// overlapping sets, the case that deadlocks without one global order. It
// returns them sorted and without duplicates, the order of
// MultiLease.Leases, so that history events name the right key.
func multiSet(keys []string, id string, seq int) []string {
	h := seq
	for _, c := range id {
		h = h*31 + int(c)
	}
	n := len(keys)
	if n <= 3 {
		return slices.Compact(slices.Sorted(slices.Values(keys)))
	}
	a := h % n
	if a < 0 {
		a += n
	}
	set := []string{keys[(a+2)%n], keys[a], keys[(a+1+seq%(n-2))%n]}
	slices.Sort(set)
	return slices.Compact(set)
}

// memberSeq numbers the history events of member i of n of a worker's
// seq-th acquisition: seq itself for one lock or permit.
func memberSeq(seq, i, n int) int {
	if n == 1 {
		return seq
	}
	return seq*8 + i
}
