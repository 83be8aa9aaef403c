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
	// op runs the operation on each node and handles its late answers.
	op nodeOp
	// decided reports whether the answers so far decide the operation;
	// the wait stops as soon as they do. (A function of d, not a closure:
	// the common ones need no allocation.)
	decided func(d *driver, rs []nodeResult) bool
}

// nodeOp is what a quorumOp does on each node. An interface, not func
// fields, so that the acquire and release (a pointer each) are passed
// without allocating a closure per call.
type nodeOp interface {
	// node runs the operation on node i, under ctx with the per-node
	// deadline; its result's out says yes, no or failed.
	node(ctx context.Context, i int, n *node) nodeResult
	// late receives each answer that came after the decision, with the
	// decision (see round.finish), on the node's goroutine (or, for an
	// answer that came between the decision and finish, on the caller's,
	// in finish): it undoes what the node did when the operation failed.
	// It starts background work with GoChild (work of the driver's group,
	// or a caller that the Locker's Close waits for).
	late(r nodeResult, success bool)
}

// nodeFunc is a nodeOp without late handling.
type nodeFunc func(ctx context.Context, i int, n *node) nodeResult

func (f nodeFunc) node(ctx context.Context, i int, n *node) nodeResult { return f(ctx, i, n) }
func (nodeFunc) late(nodeResult, bool)                                 {}

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
	f := d.start(ctx, deadline, op.op)
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
	d   *driver
	op  nodeOp
	ctx context.Context // the caller's
	// answers carries the index of each node whose answer is in res, until
	// the decision; buffered, so that node goroutines never block on it
	// (an int channel is one allocation; one of nodeResult would be two).
	answers chan int
	res     []nodeResult    // per node: its answer, written before its index is sent
	nctx    context.Context // the caller's ctx with the per-node deadline
	cancel  context.CancelFunc
	running atomic.Int32 // node goroutines still running; the last cancels nctx

	mu      sync.Mutex
	decided bool
	expired bool          // the wait ended by the per-node deadline
	got     []bool        // per node: its answer was collected by the caller
	pending *pendingNodes // the nodes still running at the decision; nil if none

	// finished: finish has recorded the decision (success). An answer
	// that comes between the decision and finish is parked (its index in
	// parked, the answer in res) and handed to the late handler by finish.
	finished bool
	success  bool
	parked   []int

	// Storage of res, got and the collected answers for the usual number
	// of nodes, so that a round makes no allocations of its own for them.
	resBuf [inlineNodes]nodeResult
	rsBuf  [inlineNodes]nodeResult
	gotBuf [inlineNodes]bool
}

// inlineNodes is the number of nodes a fanout has room for without
// allocating its slices.
const inlineNodes = 5

// start sends op to every node. op runs with the shared per-node context;
// its late handler receives the answers that came after the decision
// together with the decision, on the node's goroutine.
func (d *driver) start(ctx context.Context, deadline time.Time, op nodeOp) *fanout {
	n := len(d.nodes)
	f := &fanout{d: d, op: op, ctx: ctx, answers: make(chan int, n)}
	f.res, f.got = f.resBuf[:0], f.gotBuf[:0]
	if n > inlineNodes {
		f.res, f.got = make([]nodeResult, 0, n), make([]bool, 0, n)
	}
	f.res, f.got = f.res[:n], f.got[:n]
	f.nctx, f.cancel = context.WithDeadline(ctx, deadline)
	f.running.Store(int32(n))
	for i := range d.nodes {
		r := d.runner(f, i)
		if !d.g.Go(r.fn) {
			d.runners.Put(r)
			// The driver is closing: answer at once.
			f.res[i] = nodeResult{i: i, out: failed, err: errDriverClosed, nerr: &NodeError{Addr: d.nodes[i].addr, Err: errDriverClosed}}
			f.answers <- i
			f.nodeDone()
		}
	}
	return f
}

// runner hands one node's call to a goroutine of the driver's group: its
// fn, made once, is reused from call to call (through driver.runners), so
// that starting a node's call allocates no closure.
type runner struct {
	d  *driver
	f  *fanout
	i  int
	fn func()
}

// runner returns a runner of f's call on node i.
func (d *driver) runner(f *fanout, i int) *runner {
	r, _ := d.runners.Get().(*runner)
	if r == nil {
		r = &runner{d: d}
		r.fn = r.run
	}
	r.f, r.i = f, i
	return r
}

// run takes the call and gives the runner back before making it.
func (r *runner) run() {
	f, i := r.f, r.i
	r.f = nil
	r.d.runners.Put(r)
	f.run(i)
}

// run is node i's call, on its own goroutine: the answer goes to the
// caller, or to the late handler once the operation is decided.
func (f *fanout) run(i int) {
	d, nd := f.d, f.d.nodes[i]
	r := f.op.node(f.nctx, i, nd)
	r.i = i
	if r.out == failed && r.nerr == nil {
		r.nerr = d.nodeError(f.ctx, f.nctx, nd, r.err)
	}
	// Counted down after the answer was handed over, so that when the
	// count reaches 0 (and nctx ends) every answer is with the caller or
	// its late handler.
	defer f.nodeDone()
	f.mu.Lock()
	if !f.decided {
		f.res[i] = r
		f.answers <- i
		f.mu.Unlock()
		return
	}
	if !f.finished {
		f.res[i] = r
		f.parked = append(f.parked, i)
		f.mu.Unlock()
		return
	}
	p, success := f.pending, f.success
	f.mu.Unlock()
	f.op.late(r, success)
	p.done(i)
}

// pendingNodes are the nodes whose answer to an operation came after its
// decision: an operation that must not overtake theirs (a release after
// the acquire) waits for them. A node's channel is made only when someone
// waits for it. Once every one has answered, the per-node state is
// dropped, so that a lock held for long keeps only this small struct.
type pendingNodes struct {
	mu   sync.Mutex
	st   *pendState // nil once every node has answered
	left int
	// tracked, if not nil, records these nodes (of a release or failed
	// attempt) under key until every one has answered.
	tracked *releasing
	key     string
	// finished: every node has answered (st is nil).
	finished atomic.Bool
	// prev: while this is tracked's latest entry for key, the earlier
	// tracked operations not done when it was recorded (guarded by
	// tracked.mu).
	prev []*pendingNodes
}

// pendState is the per-node state of pendingNodes, in one allocation for
// the usual number of nodes.
type pendState struct {
	pend    []bool          // per node: its answer is not handled yet
	chans   []chan struct{} // per node: made by wait, closed by done
	pendBuf [inlineNodes]bool
	chanBuf [inlineNodes]chan struct{}
}

// newPendingNodes returns the pending nodes: those for which answered is
// false.
func newPendingNodes(answered []bool) *pendingNodes {
	st := &pendState{}
	n := len(answered)
	st.pend, st.chans = st.pendBuf[:0], st.chanBuf[:0]
	if n > inlineNodes {
		st.pend, st.chans = make([]bool, 0, n), make([]chan struct{}, 0, n)
	}
	st.pend, st.chans = st.pend[:n], st.chans[:n]
	p := &pendingNodes{st: st}
	for i, a := range answered {
		if !a {
			st.pend[i] = true
			p.left++
		}
	}
	return p
}

// wait returns a channel closed when node i's answer has been handled, or
// nil if it already was (or was never pending). p may be nil.
func (p *pendingNodes) wait(i int) <-chan struct{} {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.st
	if st == nil || !st.pend[i] {
		return nil
	}
	if st.chans[i] == nil {
		st.chans[i] = make(chan struct{})
	}
	return st.chans[i]
}

// done records that node i's late answer has been handled. p may be nil.
func (p *pendingNodes) done(i int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.st
	if st == nil || !st.pend[i] {
		return
	}
	st.pend[i] = false
	if st.chans[i] != nil {
		close(st.chans[i])
		st.chans[i] = nil
	}
	if p.left--; p.left == 0 {
		p.st = nil
		p.finished.Store(true)
		if p.tracked != nil {
			p.tracked.forget(p.key)
		}
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
	rs = f.rsBuf[:0]
	if n > inlineNodes {
		rs = make([]nodeResult, 0, n)
	}
collect:
	for len(rs) < n {
		select {
		case i := <-f.answers:
			rs = append(rs, f.res[i])
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
		case i := <-f.answers:
			rs = append(rs, f.res[i])
		default:
			break drain
		}
	}
	for _, r := range rs {
		f.got[r.i] = true
	}
	if len(rs) < n {
		f.pending = newPendingNodes(f.got)
	}
	f.mu.Unlock()
	return rs, ctxDone
}

// finish records the decision and hands the answers parked meanwhile to
// the late handler, on the caller's goroutine.
func (f *fanout) finish(success bool) {
	f.mu.Lock()
	f.finished, f.success = true, success
	parked := f.parked
	f.parked = nil
	f.mu.Unlock()
	for _, i := range parked {
		f.op.late(f.res[i], success)
		f.pending.done(i)
	}
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
