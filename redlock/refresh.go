package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/redislua"
)

// Refresh extends this hold on every node, in parallel, to at least ttl;
// it succeeds when a quorum extended it within the validity of ttl.
func (l *lock) Refresh(ctx context.Context, ttl time.Duration) error {
	d := l.d
	validity, err := d.Validity(ttl)
	if err != nil {
		return err
	}
	if d.closed.Load() {
		return backend.ErrClosed
	}
	// The seeds: a refresh counts if a majority extended the lock within
	// the validity. It returns as soon as a quorum has (or cannot), so a
	// dead or slow minority does not delay it.
	r := d.run(ctx, quorumOp{
		wait: validity,
		op: nodeFunc(func(ctx context.Context, _ int, nd *node) nodeResult {
			held, err := nd.batch.Refresh(ctx, l.keys, l.owner, 0, l.hold, ttl)
			switch {
			case err != nil:
				return nodeResult{out: failed, err: err}
			case !held:
				return nodeResult{out: no}
			}
			return nodeResult{out: yes}
		}),
		decided: settled,
	})
	r.finish(true)
	return l.refreshResult(ctx, &r, validity)
}

// refreshResult decides a refresh from the nodes' answers.
func (l *lock) refreshResult(ctx context.Context, r *round, validity time.Duration) error {
	d := l.d
	t := r.tally()
	switch {
	case t.yes >= d.quorum && r.elapsed < validity:
		return nil
	case t.no > len(d.nodes)-d.quorum:
		return errNotHeld
	case r.ctxDone:
		return async.CtxError(ctx)
	case t.yes >= d.quorum:
		return fmt.Errorf("%w: a quorum extended the lock after %v, beyond the validity of %v", backend.ErrUnavailable, r.elapsed.Round(time.Microsecond), validity)
	}
	return r.unavailable("refresh")
}

// RefreshBatch implements backend.BatchRefresher: one pipeline per node,
// the nodes in parallel; each lock is extended if a quorum extended it
// within its validity.
func (d *driver) RefreshBatch(ctx context.Context, items []backend.RefreshItem) []error {
	errs := make([]error, len(items))
	b := d.batch(ctx, items, errs)
	if len(b.locks) == 0 {
		return errs
	}
	if d.closed.Load() {
		for _, i := range b.idx {
			errs[i] = backend.ErrClosed
		}
		return errs
	}
	// Done when every lock is decided: a quorum extended it, or a majority
	// no longer has it.
	r := d.run(ctx, quorumOp{
		wait: b.validity,
		op: nodeFunc(func(ctx context.Context, _ int, nd *node) nodeResult {
			res := redislua.RefreshBatch(ctx, nd.client, b.ops)
			out := nodeResult{out: yes, batch: make([]nodeBatchResult, len(res))}
			for j, x := range res {
				out.batch[j] = nodeBatchResult{held: x.Held, err: x.Err}
			}
			return out
		}),
		decided: func(d *driver, rs []nodeResult) bool {
			for j := range b.locks {
				if !settled(d, itemResults(rs, j)) {
					return false
				}
			}
			return true
		},
	})
	r.finish(true)
	for j, l := range b.locks {
		rs := itemResults(r.rs, j)
		for k, x := range rs {
			if x.out == failed && x.nerr == nil {
				rs[k].nerr = d.nodeError(ctx, r.f.nctx, d.nodes[x.i], x.err)
			}
		}
		errs[b.idx[j]] = l.refreshResult(ctx, r.with(rs), b.ops[j].TTL-d.drift(b.ops[j].TTL))
	}
	return errs
}

// refreshBatch is the part of a batch that this driver refreshes.
type refreshBatch struct {
	locks    []*lock
	idx      []int // of each lock in the items
	ops      []redislua.RefreshOp
	validity time.Duration // the shortest
}

// batch sorts items: the locks of this driver go to the batch; the others
// are refreshed one by one, and bad TTLs refused, into errs.
func (d *driver) batch(ctx context.Context, items []backend.RefreshItem, errs []error) refreshBatch {
	b := refreshBatch{validity: time.Duration(1<<63 - 1)}
	for i, it := range items {
		l, ok := it.Lock.(*lock)
		if !ok || l.d != d {
			errs[i] = it.Lock.Refresh(ctx, it.TTL)
			continue
		}
		v, err := d.Validity(it.TTL)
		if err != nil {
			errs[i] = err
			continue
		}
		b.validity = min(b.validity, v)
		b.locks, b.idx = append(b.locks, l), append(b.idx, i)
		b.ops = append(b.ops, redislua.RefreshOp{Keys: l.keys, Owner: l.owner, Hold: l.hold, TTL: it.TTL})
	}
	return b
}

// itemResults is the nodes' answers for the j-th lock of a batch; a node
// whose whole batch failed failed for each lock.
func itemResults(rs []nodeResult, j int) []nodeResult {
	out := make([]nodeResult, 0, len(rs))
	for _, r := range rs {
		if r.batch == nil {
			out = append(out, r)
			continue
		}
		br := r.batch[j]
		switch {
		case br.err != nil:
			out = append(out, nodeResult{i: r.i, out: failed, err: br.err})
		case br.held:
			out = append(out, nodeResult{i: r.i, out: yes})
		default:
			out = append(out, nodeResult{i: r.i, out: no})
		}
	}
	return out
}
