package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/redislua"
)

// The operator calls (Locker.Inspect, Locker.ForceRelease): one script
// per node, on every node in parallel; the answer is the holder a quorum
// of nodes agrees on.

var (
	_ backend.Inspector     = (*driver)(nil)
	_ backend.ForceReleaser = (*driver)(nil)
)

// Inspect implements backend.Inspector: it reads the lock on every node
// (one script each, changing nothing) and reports the owner that a quorum
// of nodes shows as holder, with the holds present on a quorum of them and
// the smallest PTTL among them; Held false when no owner can have a quorum
// whatever the nodes that did not answer hold. When the answers cannot
// tell (too few nodes answered), the error wraps ErrUnavailable.
func (d *driver) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	info, r, answered, sure := d.admin(ctx, key, d.nodeTimeout, redislua.Inspect)
	if sure {
		return info, nil
	}
	return backend.LockInfo{}, r.undecided(ctx, "inspect", answered)
}

// ForceRelease implements backend.ForceReleaser: it deletes the lock on
// every node, whatever its owner (one script each, which also publishes
// the wake-up), and reports the evicted holder as Inspect would have. It
// succeeds when a quorum of nodes deleted it — no owner can then hold a
// quorum — and nodes that did not answer are left as they are (their copy
// expires with its TTL); fewer than a quorum is an error wrapping
// ErrUnavailable, with the lock deleted on the nodes that answered.
//
// With want named, each node deletes the lock only where want holds it; if
// want's copies deleted fall short of a quorum, want did not hold the lock:
// the error wraps ErrNotHeld (its minority copies are gone, the other
// holder's are untouched).
func (d *driver) ForceRelease(ctx context.Context, key string, want backend.Holder) (backend.LockInfo, error) {
	var deleted atomic.Int32
	op := func(ctx context.Context, c goredis.Scripter, k redislua.Keys) (redislua.LockState, error) {
		s, err := redislua.ForceRelease(ctx, c, k, want)
		if errors.Is(err, backend.ErrNotHeld) {
			return redislua.LockState{}, nil // answered: want does not hold it here
		}
		if err == nil && s.Held {
			deleted.Add(1)
		}
		return s, err
	}
	info, r, answered, _ := d.admin(ctx, key, max(d.nodeTimeout, MinReleaseWait), op)
	if answered < d.quorum {
		return backend.LockInfo{}, r.undecided(ctx, "force-release", answered)
	}
	if want.Owner != "" && int(deleted.Load()) < d.quorum {
		return backend.LockInfo{}, fmt.Errorf("%w: not held by %s on a quorum of nodes", backend.ErrNotHeld, want.Owner)
	}
	return info, nil
}

// admin runs op on every node and merges the states it returns (see
// merge): sure reports whether the merged answer is certain.
func (d *driver) admin(ctx context.Context, key string, wait time.Duration, op func(context.Context, goredis.Scripter, redislua.Keys) (redislua.LockState, error)) (info backend.LockInfo, r round, answered int, sure bool) {
	if d.closed.Load() {
		return backend.LockInfo{}, round{d: d}, 0, false
	}
	k := d.keys(key)
	states := make([]redislua.LockState, len(d.nodes)) // written by node i only, read once its answer is in
	r = d.run(ctx, quorumOp{
		wait: wait,
		op: nodeFunc(func(ctx context.Context, i int, nd *node) nodeResult {
			s, err := op(ctx, nd.client, k)
			if err != nil {
				return nodeResult{out: failed, err: err}
			}
			states[i] = s
			return nodeResult{out: yes}
		}),
		decided: func(*driver, []nodeResult) bool { return false }, // every node's answer counts
	})
	r.finish(true)
	var got []redislua.LockState
	for _, x := range r.rs {
		if x.out == yes {
			got = append(got, states[x.i])
		}
	}
	info, sure = merge(got, len(d.nodes)-len(got), d.quorum)
	info.Key = key
	return info, r, len(got), sure
}

// merge reports the holder that the most of the states show (ties: the
// smaller owner id), as held when at least quorum of them show it (sure),
// as not held when it could not reach quorum even with every one of the
// missing nodes (sure), and otherwise as possibly held (not sure). The
// holder's holds are those on quorum of its states (or on all of them
// when fewer), its TTL the smallest of their PTTLs, its metadata theirs.
func merge(states []redislua.LockState, missing, quorum int) (info backend.LockInfo, sure bool) {
	info.Waiters = -1
	by := map[string][]redislua.LockState{}
	var best string
	for _, s := range states {
		if !s.Held {
			continue
		}
		by[s.Owner] = append(by[s.Owner], s)
		if n, m := len(by[s.Owner]), len(by[best]); n > m || (n == m && s.Owner < best) {
			best = s.Owner
		}
	}
	agree := by[best]
	switch {
	case len(agree)+missing < quorum:
		return info, true
	case len(agree) == 0: // the silent nodes could hold a quorum
		return info, false
	case len(agree) >= quorum:
		sure = true
	}
	need := min(quorum, len(agree))
	count := map[string]int{}
	info.Held, info.Owner, info.TTL = true, best, agree[0].PTTL
	for _, s := range agree {
		for _, h := range s.Holds {
			if count[h]++; count[h] == need {
				info.Holds++
			}
		}
		info.TTL = min(info.TTL, s.PTTL)
		if info.Metadata == "" {
			info.Metadata = s.Metadata
		}
	}
	return info, sure
}

// undecided is the error of an operator call whose answers do not decide
// it: the driver closed, ctx ended, or too few nodes answered.
func (r *round) undecided(ctx context.Context, what string, answered int) error {
	switch {
	case r.f == nil:
		return backend.ErrClosed
	case r.ctxDone:
		return async.CtxError(ctx)
	}
	return r.unavailableMsg(fmt.Sprintf("%s: %d of %d nodes answered, which does not decide it (quorum %d)", what, answered, len(r.d.nodes), r.d.quorum))
}
