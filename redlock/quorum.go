package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// quorumOp is one operation that a quorum of the nodes decides: acquire,
// release, refresh and batch refresh are each one.
type quorumOp struct {
	// wait bounds the wait for the nodes, from the start: the per-node
	// timeout (capped at the validity) or the release wait.
	wait time.Duration
	// node runs the operation on node i, under ctx with the per-node
	// deadline; its result's out says yes, no or failed.
	node func(ctx context.Context, i int, n *node) nodeResult
	// decided reports whether the answers so far decide the operation;
	// the wait stops as soon as they do. (A function of d, not a closure:
	// the common ones need no allocation.)
	decided func(d *driver, rs []nodeResult) bool
	// late, if not nil, receives each answer that came after the decision,
	// with the decision (see round.finish), on the node's goroutine: it
	// undoes what the node did when the operation failed.
	late func(r nodeResult, success bool)
}

// round is one quorumOp, decided: the answers collected by the decision.
type round struct {
	d        *driver
	f        *fanout
	rs       []nodeResult
	ctxDone  bool      // the caller's ctx ended before the decision
	started  time.Time // when the requests were sent
	deadline time.Time // started + wait
	elapsed  time.Duration
}

// run sends op to every node in parallel and collects their answers until
// op.decided says they decide it, every node has answered, op.wait has
// passed or ctx has ended. The caller decides on the round and then calls
// finish, which hands the later answers to op.late.
func (d *driver) run(ctx context.Context, op quorumOp) round {
	started := time.Now()
	deadline := started.Add(op.wait)
	f := d.start(ctx, deadline, op.node, op.late)
	rs, ctxDone := f.wait(ctx, len(d.nodes), func(rs []nodeResult) bool { return op.decided(d, rs) })
	return round{d: d, f: f, rs: rs, ctxDone: ctxDone, started: started, deadline: deadline, elapsed: time.Since(started)}
}

// finish records the decision (success matters to late handlers only) and
// releases the late answers to op.late.
func (r *round) finish(success bool) { r.f.finish(success) }

// tally counts the answers collected by the decision.
func (r *round) tally() tally { return count(r.rs) }

// failed counts the nodes that failed or timed out by the decision.
func (r *round) failed() int { return r.tally().failed + len(r.f.timedOut()) }

// with is r with the answers rs instead (one lock's part of a batch).
func (r *round) with(rs []nodeResult) *round {
	v := *r
	v.rs = rs
	return &v
}

// settled reports whether a quorum said yes or a majority said no: how
// release and refresh are decided.
func settled(d *driver, rs []nodeResult) bool {
	t := count(rs)
	return t.yes >= d.quorum || t.no > len(d.nodes)-d.quorum
}

// outcome is what one node answered.
type outcome uint8

const (
	failed outcome = iota // no answer, an I/O error or an error reply (see nodeResult.err)
	yes                   // acquired / reentered, released, extended
	no                    // busy (held by another owner), or not held by us
)

// nodeResult is one node's answer to one operation.
type nodeResult struct {
	i      int
	out    outcome
	pttl   time.Duration // busy: the holder's remaining time on this node (0: unknown)
	holder string        // busy: the holder's owner id
	age    time.Duration // busy: how long ago the holder's newest hold was taken (negative: unknown)
	err    error         // failed: the go-redis error, unchanged
	nerr   error         // failed: err in distlock's conventions, as a *NodeError
	// queued: the node's undo is already arranged (the acquire it must
	// follow was still in flight).
	queued bool
	batch  []nodeBatchResult // RefreshBatch: one per op
}

type nodeBatchResult struct {
	held bool
	err  error
}

// fanout is one operation sent to every node in parallel. Each node's call
// runs on its own goroutine (of the driver's async.Group, so Close waits
// for it) under one context with the operation's deadline. The caller
// collects answers until it can decide, the deadline passes or its ctx
// ends; answers that arrive later go to the operation's late handler, which
// learns the final decision first.
type fanout struct {
	results chan nodeResult // buffered: node goroutines never block on it
	nctx    context.Context // the caller's ctx with the per-node deadline
	cancel  context.CancelFunc
	running atomic.Int32 // node goroutines still running; the last cancels nctx

	mu      sync.Mutex
	decided bool
	expired bool          // the wait ended by the per-node deadline
	got     []bool        // per node: its answer was collected by the caller
	pending *pendingNodes // the nodes still running at the decision; nil if none

	final   chan struct{} // closed by finish
	success bool          // the decision, valid once final is closed
}

// start sends op to every node. op runs with the shared per-node context;
// late, if not nil, receives the answers that came after the decision
// together with the decision, on the node's goroutine.
func (d *driver) start(ctx context.Context, deadline time.Time, op func(ctx context.Context, i int, n *node) nodeResult, late func(r nodeResult, success bool)) *fanout {
	n := len(d.nodes)
	f := &fanout{results: make(chan nodeResult, n), final: make(chan struct{})}
	f.nctx, f.cancel = context.WithDeadline(ctx, deadline)
	f.running.Store(int32(n))
	for i, nd := range d.nodes {
		run := func() {
			r := op(f.nctx, i, nd)
			r.i = i
			if r.out == failed && r.nerr == nil {
				r.nerr = d.nodeError(ctx, f.nctx, nd, r.err)
			}
			// Counted down after the answer was handed over, so that when
			// the count reaches 0 (and nctx ends) every answer is in the
			// channel or with its late handler.
			defer f.nodeDone()
			f.mu.Lock()
			if !f.decided {
				f.results <- r
				f.mu.Unlock()
				return
			}
			p := f.pending
			f.mu.Unlock()
			<-f.final
			if late != nil {
				late(r, f.success)
			}
			p.done(i)
		}
		if !d.g.Go(run) {
			// The driver is closing: answer at once.
			f.results <- nodeResult{i: i, out: failed, err: errDriverClosed, nerr: &NodeError{Addr: nd.addr, Err: errDriverClosed}}
			f.nodeDone()
		}
	}
	return f
}

// pendingNodes are the nodes whose answer to an operation came after its
// decision: an operation that must not overtake theirs (a release after
// the acquire) waits for them. Once every one has answered, the channels
// are dropped, so that a lock held for long keeps only this struct.
type pendingNodes struct {
	mu    sync.Mutex
	chans []chan struct{} // per node: closed when its answer is handled; nil once all were
	left  int
}

// wait returns a channel closed when node i's answer has been handled, or
// nil if it already was (or was never pending). p may be nil.
func (p *pendingNodes) wait(i int) <-chan struct{} {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.chans == nil || p.chans[i] == nil {
		return nil
	}
	return p.chans[i]
}

// done records that node i's late answer has been handled. p may be nil.
func (p *pendingNodes) done(i int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.chans == nil || p.chans[i] == nil {
		return
	}
	close(p.chans[i])
	p.chans[i] = nil
	if p.left--; p.left == 0 {
		p.chans = nil
	}
}

// nodeDone counts a node goroutine out; the last one ends nctx.
func (f *fanout) nodeDone() {
	if f.running.Add(-1) == 0 {
		f.cancel()
	}
}

// wait collects answers until enough says returns true, every node has
// answered, the per-node deadline passes or ctx ends (ctxDone). Then the
// fanout is decided: later answers go to the late handler, after finish.
func (f *fanout) wait(ctx context.Context, n int, enough func(rs []nodeResult) bool) (rs []nodeResult, ctxDone bool) {
	rs = make([]nodeResult, 0, n)
collect:
	for len(rs) < n {
		select {
		case r := <-f.results:
			rs = append(rs, r)
			if enough(rs) {
				break collect
			}
		case <-f.nctx.Done():
			ctxDone = ctx.Err() != nil
			f.expired = !ctxDone && errors.Is(f.nctx.Err(), context.DeadlineExceeded)
			break collect
		}
	}
	f.mu.Lock()
	f.decided = true
drain:
	for {
		select {
		case r := <-f.results:
			rs = append(rs, r)
		default:
			break drain
		}
	}
	if len(rs) < n {
		f.got = make([]bool, n)
		for _, r := range rs {
			f.got[r.i] = true
		}
		f.pending = &pendingNodes{chans: make([]chan struct{}, n)}
		for i, g := range f.got {
			if !g {
				f.pending.chans[i] = make(chan struct{})
				f.pending.left++
			}
		}
	}
	f.mu.Unlock()
	return rs, ctxDone
}

// finish records the decision and releases the late handlers.
func (f *fanout) finish(success bool) {
	f.success = success
	close(f.final)
}

// timedOut returns the nodes that had not answered when the per-node
// deadline passed; none if the decision came earlier.
func (f *fanout) timedOut() []int {
	if !f.expired {
		return nil
	}
	return f.missing()
}

// missing returns the nodes that had not answered at the decision.
func (f *fanout) missing() []int {
	var out []int
	for i, g := range f.got {
		if !g {
			out = append(out, i)
		}
	}
	return out
}

// tally counts answers.
type tally struct{ yes, no, failed int }

func count(rs []nodeResult) tally {
	var t tally
	for _, r := range rs {
		switch r.out {
		case yes:
			t.yes++
		case no:
			t.no++
		default:
			t.failed++
		}
	}
	return t
}
