package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/redislua"
)

var _ backend.MultiAcquirer = (*driver)(nil)

// TryAcquireAll takes several free locks in one script (one round trip),
// all or nothing (backend.MultiAcquirer): on one server or Sentinel master
// any keys, on Redis Cluster keys of one slot (a shared {hash tag} in the
// names does not help: each lock's name is hashed). Fair locks queue per
// key and are not taken this way. An attempt whose outcome is unknown is
// undone lock by lock, by hold id.
func (d *driver) TryAcquireAll(ctx context.Context, reqs []backend.Request) ([]backend.Lock, error) {
	if d.fair {
		return nil, fmt.Errorf("%w: fair locks queue per key", errors.ErrUnsupported)
	}
	all := make([]redislua.AllAttempt, len(reqs))
	for i, req := range reqs {
		if req.TTL != reqs[0].TTL {
			return nil, fmt.Errorf("%w: different TTLs", errors.ErrUnsupported)
		}
		all[i] = redislua.AllAttempt{Keys: d.keys(req.Key), Owner: req.Owner, Hold: d.holds.Next(), Metadata: req.Metadata}
	}
	if _, ok := d.client.(*goredis.ClusterClient); ok {
		slot := redislua.Slot(all[0].Keys.Lock)
		for _, a := range all[1:] {
			if redislua.Slot(a.Keys.Lock) != slot {
				return nil, fmt.Errorf("%w: keys of several Cluster slots", errors.ErrUnsupported)
			}
		}
	}
	if d.closed.Load() {
		return nil, backend.ErrClosed
	}
	if ctx.Err() != nil {
		return nil, async.CtxError(ctx)
	}
	undo := func(inFlight, child bool) {
		for i, a := range all {
			d.undo(a.Keys, reqs[i], a.Hold, inFlight, child)
		}
	}
	sent := time.Now()
	run := withTryAgain(d.cluster, func(ctx context.Context) (redislua.AllResult, error) {
		return redislua.AcquireAll(ctx, d.client, all, reqs[0].TTL)
	})
	var (
		r         redislua.AllResult
		abandoned bool
		err       error
	)
	if ctx.Done() == nil {
		r, err = run(ctx)
	} else {
		r, abandoned, err = async.Call(d.bg.Group(), ctx, run, func(_ redislua.AllResult, err error) {
			if err == nil || redislua.Ambiguous(err) {
				undo(err != nil, true)
			}
		})
	}
	if err != nil {
		if redislua.Ambiguous(err) && !abandoned {
			undo(true, false)
		}
		return nil, redislua.OpError(ctx, err)
	}
	if r.Tokens == nil {
		return nil, backend.Busy(r.PTTL)
	}
	locks := make([]backend.Lock, len(all))
	for i, a := range all {
		locks[i] = &lock{d: d, keys: a.Keys, owner: a.Owner, hold: a.Hold, token: r.Tokens[i], issued: sent}
	}
	for i, l := range locks {
		// With WithWaitReplicas: all are confirmed, or none is kept.
		if err := d.confirm(ctx, l.(*lock)); err != nil {
			for j, a := range all {
				d.undo(a.Keys, reqs[j], a.Hold, false, false)
			}
			if !errors.Is(err, ErrNotReplicated) {
				err = fmt.Errorf("%w: %w", ErrNotReplicated, err)
			}
			return nil, fmt.Errorf("lock %d of %d: %w", i+1, len(locks), err)
		}
	}
	return locks, nil
}
