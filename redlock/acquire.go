package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/redislua"
)

// TryAcquire runs one Redlock attempt: the acquire script with the same
// owner, hold id and TTL on every node in parallel, each bounded by the
// per-node timeout; success needs a quorum and validity left (counted from
// the first request). While this driver has waiters queued on the lock,
// the lock's gate node is asked first and the others only once it granted
// — or refused an owner that holds the lock on a quorum of them, when the
// attempt is not a queued waiter's (see gate.go): a nested acquisition
// succeeds whenever its owner holds a quorum.
func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if d.closed.Load() {
		return nil, backend.ErrClosed
	}
	if ctx.Err() != nil {
		return nil, async.CtxError(ctx)
	}
	validity, err := d.Validity(req.TTL)
	if err != nil {
		return nil, err
	}
	a := &attempt{d: d, h: holdRef{keys: d.keys(req.Key), owner: req.Owner, hold: d.holds.Next()}, metadata: req.Metadata, ttl: req.TTL, validity: validity, key: req.Key, gateNode: -1}
	// undo: a failed attempt gives back its holds silently, so that waiters
	// are not woken to retry the same minorities in a loop — but on the
	// lock's gate node, where waiters refused by it wait (giveBackHold).
	a.undoH = a.h
	a.undoH.keys.Channel = ""
	// unsure[i]: node i's answer was lost (the hold may be there, or may
	// still arrive). Written before the lock sees it: at the decision, or
	// by the late handler before the node's pending channel closes.
	// In the lock to be returned: late answers write it after that.
	l := &lock{d: d, holdRef: a.h}
	l.unsure = l.unsureBuf[:0]
	if len(d.nodes) > inlineNodes {
		l.unsure = make([]bool, 0, len(d.nodes))
	}
	l.unsure = l.unsure[:len(d.nodes)]
	a.unsure = l.unsure
	a.after = d.releasing.after(a.h.keys.Lock)
	var r round
	if d.waiting.has(req.Key) {
		gr, sent, ok := a.gate(ctx)
		if ok && gr.out == no {
			if final, after := a.refusedAtGate(ctx, gr); final {
				// Refused at the gate: the others were not asked.
				if d.onAttempt != nil {
					d.onAttempt(tally{no: 1})
				}
				return nil, backend.Busy(after)
			}
		}
		r = d.run(ctx, quorumOp{wait: max(0, min(d.nodeTimeout, validity-time.Since(sent))), op: a, decided: acquireDecided})
		// The validity counts from the first request sent (the gate's).
		r.elapsed = time.Since(sent)
	} else {
		r = d.run(ctx, quorumOp{wait: min(d.nodeTimeout, validity), op: a, decided: acquireDecided})
	}
	success := !r.ctxDone && r.tally().yes >= d.quorum && r.elapsed < validity
	if d.onAttempt != nil {
		d.onAttempt(r.tally())
	}
	if success {
		for _, x := range r.rs {
			a.unsure[x.i] = redislua.Ambiguous(x.err)
		}
	}
	if !success {
		// Requests not sent yet are not sent now: nothing to give back.
		a.withdrawn.Store(true)
	}
	r.finish(success)
	if success {
		l.pending = r.f.pending
		return l, nil
	}
	// This driver's next attempt on the lock waits, on each node still
	// running this one, for its answer and give-back: it must not find
	// this attempt's late grant.
	d.releasing.track(a.h.keys.Lock, r.f.pending)
	return nil, a.failed(ctx, &r)
}

// acquireDecided: a quorum granted, or too many nodes refused or failed
// for one.
func acquireDecided(d *driver, rs []nodeResult) bool {
	t := count(rs)
	return t.yes >= d.quorum || t.no+t.failed > len(d.nodes)-d.quorum
}

// attempt is one TryAcquire.
type attempt struct {
	d        *driver
	h        holdRef
	undoH    holdRef // h without the release channel: a give-back is silent
	metadata string
	ttl      time.Duration
	validity time.Duration
	unsure   []bool
	// after: the nodes still running this driver's releases of the lock,
	// or give-backs of its failed attempts, whose answers the acquire
	// waits for on each (see releasing).
	after waitList
	// withdrawn: the attempt failed; a node whose request is not sent
	// yet is not sent it.
	withdrawn atomic.Bool
	key       string // the lock's name, of which gateOf picks the gate
	// gateNode (-1: none) answered *gateResult before the fan-out (see
	// gate); the fan-out takes that answer instead of asking it again.
	gateNode   int
	gateResult *nodeResult
}

// errWithdrawn is the failure of a node whose request was not sent
// because the attempt had already failed: nothing reached the node.
var errWithdrawn = errors.New("not sent: the attempt was already decided")

// node runs the acquire script on node nd.
func (a *attempt) node(ctx context.Context, i int, nd *node) nodeResult {
	if i == a.gateNode {
		return *a.gateResult
	}
	// If ctx ends first, the request is not sent (not ambiguous).
	a.after.wait(ctx, i)
	if a.withdrawn.Load() {
		return nodeResult{out: failed, err: errWithdrawn}
	}
	r, _, err := nd.batch.Acquire(ctx, a.h.keys, a.h.owner, a.h.hold, a.metadata, a.ttl, nil)
	switch {
	case err != nil:
		return nodeResult{out: failed, err: err}
	case r.Outcome == redislua.Busy:
		return nodeResult{out: no, pttl: r.PTTL, holder: r.Holder, age: r.Age}
	}
	return nodeResult{out: yes}
}

// late handles an answer after the decision. On failure it undoes what
// this node did or may have done — a grant at once, before the node counts
// as answered (see releasing) —; on success the hold is part of the lock.
func (a *attempt) late(r nodeResult, success bool) {
	ambiguous := redislua.Ambiguous(r.err)
	switch {
	case success:
		a.unsure[r.i] = ambiguous
	case r.out == yes:
		a.d.giveBack(context.Background(), r.i, a.giveBackHold(r.i), a.ttl)
	case errors.Is(r.err, errWithdrawn):
	case ambiguous:
		a.d.undo(r.i, a.undoH, a.ttl, undoInFlight, true)
	}
}

// failed gives back, on every node, what a failed attempt holds or may
// hold, and returns the attempt's error. Nodes still running undo when
// their answer comes (late): an undo sent before the acquire lands could
// overtake it. Nodes that granted it are released before returning, so
// that the next attempt (ours or a competitor's) finds them free; nodes
// whose answer was lost are slow or unreachable: they are released in the
// background, with retries.
func (a *attempt) failed(ctx context.Context, r *round) error {
	d := a.d
	var granted []int
	for _, x := range r.rs {
		switch {
		case x.out == yes && !r.ctxDone:
			granted = append(granted, x.i)
		case x.out == yes:
			d.undo(x.i, a.undoH, a.ttl, undoLost, false)
		case redislua.Ambiguous(x.err):
			d.undo(x.i, a.undoH, a.ttl, undoInFlight, false)
		}
	}
	if r.ctxDone {
		if r.tally().no > 0 && !failedBeforeCtx(r.rs) {
			// The nodes that answered in time found the lock held, and
			// none failed but for the end of ctx: the lock is busy
			// (ErrNotAcquired), the backend is not unavailable.
			return fmt.Errorf("%w: %w", backend.Busy(0), async.CtxError(ctx))
		}
		return async.CtxError(ctx)
	}
	if g := slices.Index(granted, a.announcedAt()); g >= 0 {
		// After the others, announced: a waiter it wakes finds them free.
		gate := granted[g]
		granted = slices.Delete(granted, g, g+1)
		defer d.giveBack(ctx, gate, a.giveBackHold(gate), a.ttl)
	}
	d.releaseNodes(ctx, granted, a.undoH, a.ttl)
	return a.failure(r)
}

// failure is the error of an attempt that was decided without a quorum
// in time.
func (a *attempt) failure(r *round) error {
	d := a.d
	n, q := len(d.nodes), d.quorum
	t, failedNodes := r.tally(), r.failed()
	switch {
	case t.yes >= q:
		return fmt.Errorf("%w: a quorum of %d nodes answered after %v, beyond the validity of %v for TTL %v (nodes, network or this process slower than the TTL allows)",
			backend.ErrUnavailable, q, r.elapsed.Round(time.Microsecond), a.validity, a.ttl)
	case n-failedNodes < q:
		return r.unavailable("acquire")
	}
	busy := backend.Busy(d.retryAfter(r.rs, n-failedNodes-t.no, r.elapsed))
	if failedNodes == 0 {
		return busy
	}
	// Busy, with some nodes down: say which, as the error of a quorum
	// made impossible by failures would.
	// (Text only: a busy lock is not ErrUnavailable.)
	return fmt.Errorf("%w (%d of %d nodes granted, %d busy; failed: %v)", busy, t.yes, n, t.no, r.outcomes())
}

// failedBeforeCtx reports whether a node failed for another reason than
// the end of the caller's ctx (which cuts the round trips still under way).
func failedBeforeCtx(rs []nodeResult) bool {
	for _, r := range rs {
		var ne net.Error
		cut := errors.Is(r.err, context.Canceled) || errors.Is(r.err, context.DeadlineExceeded) || (errors.As(r.err, &ne) && ne.Timeout())
		if r.out == failed && !cut {
			return true
		}
	}
	return false
}

// releaseNodes removes one hold from the given nodes at once, in parallel,
// waiting at most the per-node timeout (ctx's end does not cut it short);
// a node without a clear answer is retried in the background.
func (d *driver) releaseNodes(ctx context.Context, idx []int, h holdRef, ttl time.Duration) {
	if len(idx) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, i := range idx {
		wg.Add(1)
		if !d.g.Go(func() {
			defer wg.Done()
			d.giveBack(ctx, i, h, ttl)
		}) {
			wg.Done()
		}
	}
	wg.Wait()
}

// giveBack removes hold h from node i, waiting at most the per-node
// timeout (ctx's end does not cut it short); without a clear answer the
// node is retried in the background. It runs on work of d.g.
func (d *driver) giveBack(ctx context.Context, i int, h holdRef, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.nodeTimeout)
	defer cancel()
	if _, err := redislua.Release(ctx, d.nodes[i].client, h.keys, h.owner, 0, h.hold); redislua.Ambiguous(err) {
		d.undo(i, h, ttl, undoLost, true)
	}
}

// retryAfter is the wait before the next attempt after a busy one: a short
// random delay after a split vote, else the time until enough busy nodes
// can free up for a quorum (freeIn). 0: unknown.
func (d *driver) retryAfter(rs []nodeResult, available int, elapsed time.Duration) time.Duration {
	base := max(elapsed, 200*time.Microsecond)
	short := base + rand.N(2*base)
	needed := d.quorum - available
	if needed <= 0 {
		return short
	}
	quorumHeld := heldByQuorum(rs, d.quorum)
	var frees []time.Duration
	for _, r := range rs {
		if r.out == no {
			frees = append(frees, d.freeIn(r, base, quorumHeld))
		}
	}
	if needed > len(frees) {
		return 0
	}
	slices.Sort(frees)
	switch p := frees[needed-1]; p {
	case 0:
		return short
	case forever:
		return 0
	default:
		return p
	}
}

// forever stands for an unknown time to free up.
const forever = time.Duration(1<<63 - 1)

// freeIn estimates when busy node r can be free for us: 0 for a
// contender's hold in the middle of its attempt; for a younger hold than
// two per-node timeouts, its age (bounded by that); for a holder's, its
// expiry; forever when unknown.
func (d *driver) freeIn(r nodeResult, base time.Duration, quorumHeld bool) time.Duration {
	bound := d.youngHold()
	pttl := r.pttl
	if pttl <= 0 {
		pttl = forever
	}
	switch {
	case quorumHeld || r.age < 0 || r.age >= bound:
		return pttl
	case r.age <= 2*base:
		return 0
	}
	return min(r.age, bound-r.age, pttl)
}

// youngHold bounds the age of a hold that may belong to an attempt still
// under way (granted here, its fate decided by the other nodes' answers):
// two per-node timeouts and some slack.
func (d *driver) youngHold() time.Duration { return 2*d.nodeTimeout + 10*time.Millisecond }

// heldByQuorum reports whether the busy answers show one owner holding a
// quorum of the nodes.
func heldByQuorum(rs []nodeResult, q int) bool {
	for i, r := range rs {
		if r.out != no {
			continue
		}
		same := 0
		for _, x := range rs[i:] {
			if x.out == no && x.holder == r.holder {
				same++
			}
		}
		if same >= q {
			return true
		}
	}
	return false
}
