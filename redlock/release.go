package redlock

import (
	"context"

	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/redislua"
)

// Release removes this hold on every node, in parallel. It succeeds when a
// quorum released it; ErrNotHeld when a majority no longer had it.
func (l *lock) Release(ctx context.Context) error {
	d := l.d
	// Decided once a quorum released the hold (the lock is then free for
	// the next owner: a quorum of nodes is) or a majority no longer had
	// it; the other nodes finish in the background.
	r := d.run(ctx, quorumOp{wait: max(d.nodeTimeout, MinReleaseWait), op: (*releaseOp)(l), decided: settled})
	r.finish(true)
	d.releasing.track(l.keys.Lock, r.f.pending)
	for _, x := range r.rs {
		if !x.queued && unfinished(x.err) {
			l.undo(x.i, false)
		}
	}
	t := r.tally()
	switch {
	case t.yes >= d.quorum:
		return nil
	case t.no > len(d.nodes)-d.quorum:
		return errNotHeld
	case r.ctxDone:
		return async.CtxError(ctx)
	}
	return r.unavailable("release")
}

// releaseOp is a lock's release, as the nodeOp of its round.
type releaseOp lock

func (o *releaseOp) node(ctx context.Context, i int, nd *node) nodeResult {
	return (*lock)(o).releaseNode(ctx, i, nd)
}

// late undoes the release of a node whose answer came after the decision
// and left the hold there, or may have.
func (o *releaseOp) late(x nodeResult, _ bool) {
	if !x.queued && unfinished(x.err) {
		(*lock)(o).undo(x.i, true)
	}
}

// unfinished reports whether a node's release that failed with err may
// have left the hold there: its outcome is unknown, or it was never sent
// (its ctx ended while it was queued in the node's batch).
func unfinished(err error) bool {
	return err != nil && (redislua.Ambiguous(err) || redislua.NotSent(err))
}

// releaseNode releases the hold on node i, after the acquire of it if that
// is still running there.
func (l *lock) releaseNode(ctx context.Context, i int, nd *node) nodeResult {
	if r, wait := l.afterAcquire(ctx, i); wait {
		return r
	}
	r, _, err := nd.batch.Release(ctx, l.keys, l.owner, 0, l.hold, nil)
	switch {
	case err != nil:
		return nodeResult{out: failed, err: err}
	case r == redislua.NotHeld:
		if l.unsure[i] {
			// The acquire's answer was lost: it may land yet.
			l.d.undo(i, l.holdRef, undoTimeout, undoInFlight, true)
		}
		return nodeResult{out: no}
	}
	return nodeResult{out: yes}
}

// afterAcquire waits, on a node whose acquire of this hold is still
// running, for it to finish. If ctx ends first it arranges the undo for
// when it finishes and returns the result to report (wait true).
func (l *lock) afterAcquire(ctx context.Context, i int) (nodeResult, bool) {
	p := l.pending.wait(i)
	if p == nil {
		return nodeResult{}, false
	}
	select {
	case <-p:
		return nodeResult{}, false
	case <-ctx.Done():
	}
	l.d.g.GoChild(func() {
		<-p
		l.undo(i, true)
	})
	return nodeResult{out: failed, err: ctx.Err(), queued: true}, true
}
