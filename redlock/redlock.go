package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/redissub"
)

// Defaults of the Redlock parameters.
const (
	// DefaultNodeTimeout bounds each node's part of an acquire or refresh
	// (the seeds: "tens of milliseconds", far below the TTL), so a dead or
	// slow node costs at most this much of the lock's validity.
	DefaultNodeTimeout = 50 * time.Millisecond
	// DefaultDriftFactor and DefaultDriftMin make the clock-drift allowance
	// ttl·0.01 + 2ms, as in the Redlock algorithm.
	DefaultDriftFactor = 0.01
	DefaultDriftMin    = 2 * time.Millisecond
	// MinReleaseWait is the least time Release waits for a node's answer,
	// whatever the node timeout (a release does not consume validity).
	MinReleaseWait = time.Second
)

// Option configures New.
type Option func(*config)

type config struct {
	defaults       []distlock.Option
	prefix         string
	nodeTimeout    time.Duration
	driftFactor    float64
	driftMin       time.Duration
	confirmTimeout time.Duration
	linger         time.Duration
	closeClients   bool
}

func defaultConfig() config {
	return config{
		prefix:      redislua.DefaultPrefix,
		nodeTimeout: DefaultNodeTimeout,
		driftFactor: DefaultDriftFactor,
		driftMin:    DefaultDriftMin,
	}
}

// WithDefaults sets options applied to every acquisition of the Locker
// (passed to distlock.New), such as distlock.WithTTL.
func WithDefaults(opts ...distlock.Option) Option {
	return func(c *config) { c.defaults = append(c.defaults, opts...) }
}

// WithPrefix sets the prefix of every Redis key and channel the Locker uses
// on every node (default "distlock:"). Lockers must use the same prefix to
// contend for the same locks.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithNodeTimeout sets how long an acquire or refresh waits for each node
// (default 50ms). It should be far below the TTL: a node that has not
// answered by then counts as failed, so it costs at most this much of the
// validity. It is capped at the validity of each request. 0 or less keeps
// the default.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.nodeTimeout = d
		}
	}
}

// WithDrift sets the clock-drift allowance: a lock acquired or refreshed
// with ttl is counted valid for ttl − elapsed − (ttl·factor + min), where
// elapsed is the time the quorum took (default factor 0.01, min 2ms). factor
// must be in [0, 1) and min at least 0, or New panics.
func WithDrift(factor float64, min time.Duration) Option {
	return func(c *config) { c.driftFactor, c.driftMin = factor, min }
}

// WithSubscribeTimeout bounds how long a waiter waits for a node to confirm
// its pub/sub subscription (default 2s); a waiter needs the confirmation of
// N − quorum + 1 nodes, and falls back to polling with its retry policy
// without it.
func WithSubscribeTimeout(d time.Duration) Option {
	return func(c *config) { c.confirmTimeout = d }
}

// WithSubscriptionLinger keeps each node's shared pub/sub connection open
// for d after its last waiter left (default 1s). 0 or less closes it at
// once.
func WithSubscriptionLinger(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			d = -1
		}
		c.linger = d
	}
}

// WithCloseClients makes the Locker's Close also close the clients. By
// default New does not take ownership of the caller's clients.
func WithCloseClients() Option {
	return func(c *config) { c.closeClients = true }
}

// New returns a Locker running Redlock over clients, one per independent
// Redis master. The quorum is len(clients)/2+1; use an odd number of
// masters (5 is the usual choice), each on its own machine, none a replica
// of another. A client may be any go-redis UniversalClient, but a
// Sentinel-managed failover client reintroduces what Redlock avoids (a
// promoted replica may lack the lock): give Redlock plain masters.
//
// The clients stay the caller's (Close does not close them unless
// WithCloseClients is given). Enable each client's ContextTimeoutEnabled so
// that the per-node timeout also bounds the socket I/O; without it a node's
// late round trip finishes in the background, bounded by the client's
// ReadTimeout (the URL opener enables it).
//
// New panics if clients is empty, contains nil or the same client twice, or
// WithDrift has values out of range: these are programming errors.
func New(clients []goredis.UniversalClient, opts ...Option) distlock.Locker {
	c := defaultConfig()
	for _, o := range opts {
		o(&c)
	}
	if err := c.check(); err != nil {
		panic("redlock.New: " + err.Error())
	}
	nodes := make([]*node, len(clients))
	for i, cl := range clients {
		if cl == nil {
			panic(fmt.Sprintf("redlock.New: client %d is nil", i))
		}
		for _, prev := range clients[:i] {
			if prev == cl {
				panic(fmt.Sprintf("redlock.New: client %d is given twice: the quorum needs independent masters", i))
			}
		}
		nodes[i] = &node{addr: addrOf(cl, i), client: cl}
	}
	if len(nodes) == 0 {
		panic("redlock.New: no clients")
	}
	return distlock.New(newDriver(nodes, c), "redlock", c.defaults...)
}

func (c *config) check() error {
	if !(c.driftFactor >= 0 && c.driftFactor < 1) {
		return fmt.Errorf("drift factor %v is not in [0, 1)", c.driftFactor)
	}
	if c.driftMin < 0 {
		return fmt.Errorf("drift minimum %v is negative", c.driftMin)
	}
	return nil
}

// addrOf names a node for errors: its address where the client tells it.
func addrOf(c goredis.UniversalClient, i int) string {
	if o, ok := c.(interface{ Options() *goredis.Options }); ok && o.Options().Addr != "" {
		return o.Options().Addr
	}
	return fmt.Sprintf("#%d", i)
}

// node is one independent Redis master.
type node struct {
	addr   string
	client goredis.UniversalClient
	sub    *redissub.Subscriber
	// downUntil (ns on the driver's monotonic clock) marks a node that just
	// failed with an I/O error: Watch does not wait for its subscription
	// confirmation meanwhile.
	downUntil atomic.Int64
}

// NodeError is the failure of one Redis master in a quorum operation. The
// error of an operation without a quorum joins the NodeErrors of the nodes
// that failed (errors.Join), so errors.As reaches each of them and, through
// Err, go-redis's own error.
type NodeError struct {
	// Addr is the node's address (host:port), or "#i" for the i-th client
	// of New whose address is unknown.
	Addr string
	// Err is the cause. It wraps distlock.ErrUnavailable for I/O errors,
	// timeouts and error replies such as LOADING, READONLY or OOM.
	Err error
}

func (e *NodeError) Error() string { return "node " + e.Addr + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e *NodeError) Unwrap() error { return e.Err }

var (
	errNotHeld      = fmt.Errorf("%w: released, expired, or held by another owner on a majority of the nodes", backend.ErrNotHeld)
	errDriverClosed = fmt.Errorf("%w: %w", backend.ErrUnavailable, backend.ErrClosed)
)

// driver implements backend.Driver, Notifier, TTLPolicy and BatchRefresher.
type driver struct {
	nodes       []*node
	quorum      int
	prefix      string
	nodeTimeout time.Duration
	driftFactor float64
	driftMin    time.Duration
	owned       bool
	holds       *redislua.HoldSource
	bg          *redislua.Undoer
	base        time.Time // for node.downUntil
	closed      atomic.Bool
}

var (
	_ backend.Driver         = (*driver)(nil)
	_ backend.Notifier       = (*driver)(nil)
	_ backend.TTLPolicy      = (*driver)(nil)
	_ backend.BatchRefresher = (*driver)(nil)
)

func newDriver(nodes []*node, c config) *driver {
	d := &driver{
		nodes:       nodes,
		quorum:      len(nodes)/2 + 1,
		prefix:      c.prefix,
		nodeTimeout: c.nodeTimeout,
		driftFactor: c.driftFactor,
		driftMin:    c.driftMin,
		owned:       c.closeClients,
		holds:       redislua.NewHoldSource(),
		bg:          redislua.NewUndoer(redislua.DefaultMaxUndo * len(nodes)),
		base:        time.Now(),
	}
	for _, n := range nodes {
		n.sub = redissub.NewSubscriber(n.client, redissub.SubscriberOptions{
			ConfirmTimeout: c.confirmTimeout,
			Linger:         c.linger,
		})
	}
	return d
}

// Capabilities: Reentrant, Notify and Expiring. Not Fencing: see the
// package documentation.
func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Reentrant: true, Notify: true, Expiring: true}
}

// drift is the clock-drift allowance for ttl.
func (d *driver) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*d.driftFactor) + d.driftMin
}

// Validity implements backend.TTLPolicy: ttl must be whole milliseconds (the
// unit of PX), and the lock is counted valid for ttl less the drift
// allowance, measured from the moment the request is sent — which equals
// the algorithm's ttl − elapsed − drift measured when the quorum is in.
func (d *driver) Validity(ttl time.Duration) (time.Duration, error) {
	if _, err := redislua.PX(ttl); err != nil {
		return 0, err
	}
	v := ttl - d.drift(ttl)
	if v <= 0 {
		return 0, fmt.Errorf("%w: %v leaves no validity after the clock-drift allowance of %v", backend.ErrInvalidTTL, ttl, d.drift(ttl))
	}
	return v, nil
}

// keys names the lock's objects on every node: no fencing counter.
func (d *driver) keys(key string) redislua.Keys {
	k := redislua.KeysFor(d.prefix, key)
	k.Fence = ""
	return k
}

// nodeError puts a node's failure into distlock's conventions. A node that
// ran out of its per-node time gets ErrUnavailable without the context
// error (the caller's ctx did not end); a caller's ctx that ended is kept.
func (d *driver) nodeError(ctx, nctx context.Context, n *node, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() == nil && !redislua.IsReply(err) {
		n.markDown(d) // unreachable or too slow, not cancelled by the caller
	}
	if ctx.Err() == nil && nctx.Err() != nil {
		return &NodeError{Addr: n.addr, Err: fmt.Errorf("%w: no answer within the per-node timeout (%v)", backend.ErrUnavailable, err)}
	}
	return &NodeError{Addr: n.addr, Err: redislua.Classify(ctx, err)}
}

func (n *node) markDown(d *driver) {
	n.downUntil.Store(int64(time.Since(d.base) + time.Second))
}

func (n *node) down(d *driver) bool {
	return int64(time.Since(d.base)) < n.downUntil.Load()
}

// unavailable is the error of an operation that could not reach a quorum
// because nodes failed.
func (d *driver) unavailable(what string, t tally, rs []nodeResult, f *fanout, deadline time.Time, started time.Time) error {
	return fmt.Errorf("%w: %s: %d of %d nodes succeeded, quorum is %d: %w", backend.ErrUnavailable, what, t.yes, len(d.nodes), d.quorum, d.nodeErrors(rs, f, deadline, started))
}

// nodeErrors joins the errors of the nodes that failed or had not answered
// at the decision, in node order.
func (d *driver) nodeErrors(rs []nodeResult, f *fanout, deadline time.Time, started time.Time) error {
	o := nodeOutcomes{parts: make([]string, len(d.nodes))}
	for i, nd := range d.nodes {
		o.parts[i] = "node " + nd.addr + ": no answer yet when the attempt was decided"
	}
	for _, r := range rs {
		switch r.out {
		case failed:
			o.parts[r.i] = r.nerr.Error()
			o.errs = append(o.errs, r.nerr)
		case no:
			o.parts[r.i] = "node " + d.nodes[r.i].addr + ": refused (held by another owner)"
		default:
			o.parts[r.i] = "node " + d.nodes[r.i].addr + ": ok"
		}
	}
	for _, i := range f.timedOut() {
		ne := &NodeError{Addr: d.nodes[i].addr, Err: fmt.Errorf("%w: no answer within the per-node timeout (%v)", backend.ErrUnavailable, deadline.Sub(started))}
		o.parts[i] = ne.Error()
		o.errs = append(o.errs, ne)
	}
	return o
}

// nodeOutcomes says what every node of one attempt answered, in the order
// of the nodes, on one line; it unwraps to the *NodeError of each node that
// failed, so errors.Is and errors.As see them.
type nodeOutcomes struct {
	parts []string
	errs  []error
}

func (o nodeOutcomes) Error() string   { return strings.Join(o.parts, "; ") }
func (o nodeOutcomes) Unwrap() []error { return o.errs }

func (d *driver) index(addr string) int {
	for i, n := range d.nodes {
		if n.addr == addr {
			return i
		}
	}
	return len(d.nodes)
}

// TryAcquire runs one Redlock attempt: the acquire script with the same
// owner, hold id and TTL on every node in parallel, each bounded by the
// per-node timeout; success needs a quorum and validity left.
func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if d.closed.Load() {
		return nil, backend.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	validity, err := d.Validity(req.TTL)
	if err != nil {
		return nil, err
	}
	k := d.keys(req.Key)
	owner, hold, ttl := req.Owner, d.holds.Next(), req.TTL
	started := time.Now()
	deadline := started.Add(min(d.nodeTimeout, validity))
	n, q := len(d.nodes), d.quorum
	// unsure[i]: node i's answer was lost (the hold may be there, or may
	// still arrive). Written before the lock sees it: at the decision, or
	// by the late handler before the node's pending channel closes.
	unsure := make([]bool, n)
	// undoKeys: how a failed attempt gives back its holds — silently. A
	// give-back that announced itself would wake the waiters of every
	// Locker, this one's first, after the very minority they just failed
	// to complete: while other owners' minorities stay (contenders that
	// died mid-attempt, until their TTL) they would retry in a loop. The
	// contenders of a live split vote need no message either: each sees
	// the others' holds young and retries after a short random delay
	// (retryAfter).
	undoKeys := k
	undoKeys.Channel = ""
	f := d.start(ctx, deadline, func(ctx context.Context, _ int, nd *node) nodeResult {
		r, err := redislua.Acquire(ctx, nd.client, k, owner, hold, ttl)
		switch {
		case err != nil:
			return nodeResult{out: failed, err: err}
		case r.Outcome == redislua.Busy:
			return nodeResult{out: no, pttl: r.PTTL, holder: r.Holder, age: r.Age}
		}
		return nodeResult{out: yes}
	}, func(r nodeResult, success bool) {
		k := undoKeys
		// An answer after the decision. On failure undo what this node
		// did or may have done; on success the hold is part of the lock.
		ambiguous := redislua.Ambiguous(r.err)
		switch {
		case success:
			unsure[r.i] = ambiguous
		case r.out == yes:
			d.bg.Undo(d.nodes[r.i].client, k, owner, 0, hold, ttl, true)
		case ambiguous:
			d.bg.UndoAcquire(d.nodes[r.i].client, k, owner, 0, hold, ttl, true)
		}
	})
	rs, ctxDone := f.wait(ctx, n, func(rs []nodeResult) bool {
		t := count(rs)
		return t.yes >= q || t.no+t.failed > n-q
	})
	t := count(rs)
	elapsed := time.Since(started)
	success := !ctxDone && t.yes >= q && elapsed < validity
	if success {
		for _, r := range rs {
			unsure[r.i] = redislua.Ambiguous(r.err)
		}
	}
	f.finish(success)
	if success {
		return &lock{d: d, keys: k, owner: owner, hold: hold, pending: f.pending, unsure: unsure}, nil
	}

	// Failed: give back, on every node, what this attempt holds or may hold.
	// Nodes still running undo when their answer comes (late handler):
	// an undo sent before the acquire lands could overtake it.
	// Nodes that granted it are released before returning, so that the
	// next attempt (ours or a competitor's) finds them free; nodes whose
	// answer was lost are slow or unreachable: they are released in the
	// background, with retries.
	var granted []int
	for _, r := range rs {
		switch {
		case r.out == yes && !ctxDone:
			granted = append(granted, r.i)
		case r.out == yes:
			d.bg.Undo(d.nodes[r.i].client, undoKeys, owner, 0, hold, ttl, false)
		case redislua.Ambiguous(r.err):
			d.bg.UndoAcquire(d.nodes[r.i].client, undoKeys, owner, 0, hold, ttl, false)
		}
	}
	if ctxDone {
		if t.no > 0 && !failedBeforeCtx(rs) {
			// The nodes that answered in time found the lock held, and
			// none failed but for the end of ctx: the lock is busy
			// (ErrNotAcquired), the backend is not unavailable.
			return nil, fmt.Errorf("%w: %w", backend.Busy(0), async.CtxError(ctx))
		}
		return nil, async.CtxError(ctx)
	}
	d.releaseNodes(ctx, granted, undoKeys, owner, hold, ttl)

	failedNodes := t.failed + len(f.timedOut())
	switch {
	case t.yes >= q:
		return nil, fmt.Errorf("%w: a quorum of %d nodes answered after %v, beyond the validity of %v for TTL %v (nodes, network or this process slower than the TTL allows)",
			backend.ErrUnavailable, q, elapsed.Round(time.Microsecond), validity, ttl)
	case n-failedNodes < q:
		return nil, d.unavailable("acquire", tally{t.yes, t.no, failedNodes}, rs, f, deadline, started)
	}
	busy := backend.Busy(d.retryAfter(rs, n-failedNodes-t.no, elapsed))
	if failedNodes == 0 {
		return nil, busy
	}
	// Busy, with some nodes down: say which, as the error of a quorum
	// made impossible by failures would.
	// (Text only: a busy lock is not ErrUnavailable.)
	return nil, fmt.Errorf("%w (%d of %d nodes granted, %d busy; failed: %v)", busy, t.yes, n, t.no, d.nodeErrors(rs, f, deadline, started))
}

// retryAfter is the wait before the next attempt after a busy one: until
// enough busy nodes can free up for a quorum, each busy node counted by
// when it can (freeIn). Nodes held by contenders in the middle of their
// own attempt free up at once — a split vote — and the wait is then a
// short random delay, 1 to 3 times the attempt's duration (at least
// 200µs), so that the contenders do not collide again (the seeds' advice);
// so it is when the nodes that were free or ours would make a quorum on
// their own. Otherwise it is the quorum-th time to free up: a holder that
// crashed is taken over then, a release wakes waiters sooner, and a waiter
// facing minorities left behind (contenders that died mid-attempt) sleeps
// until one of them ends instead of retrying in a loop. 0: unknown.
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

// freeIn estimates when busy node r can be free for us. A lock held by
// one owner on a quorum of nodes is held, however young: free when it
// expires (or released, which wakes waiters). Otherwise a contender's
// failed attempt holds a minority for about one attempt and gives it back
// at once, within two per-node timeouts (its decision, then its release
// of the nodes that granted it): a hold taken within two of our own
// attempt's durations is a contender's in the middle of its attempt (0,
// free at once); one taken within that bound but earlier is a slow
// contender's that has yet to give it back, or a dead one's: looked at
// again after as long as it has existed (so a dead contender's hold costs
// a few attempts, spaced out geometrically), by the bound at the latest,
// or when it expires; any other hold (or one of unknown age) is a
// holder's, free when it expires (forever if its expiry is unknown).
func (d *driver) freeIn(r nodeResult, base time.Duration, quorumHeld bool) time.Duration {
	bound := 2*d.nodeTimeout + 10*time.Millisecond
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

// releaseNodes removes one hold from the given nodes at once, in parallel,
// waiting at most the per-node timeout (ctx's end does not cut it short);
// a node without a clear answer is retried in the background.
func (d *driver) releaseNodes(ctx context.Context, idx []int, k redislua.Keys, owner, hold string, ttl time.Duration) {
	if len(idx) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.nodeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, i := range idx {
		nd := d.nodes[i]
		wg.Add(1)
		if !d.bg.Go(func() {
			defer wg.Done()
			if _, err := redislua.Release(ctx, nd.client, k, owner, 0, hold); redislua.Ambiguous(err) {
				d.bg.Undo(nd.client, k, owner, 0, hold, ttl, true)
			}
		}, false) {
			wg.Done()
		}
	}
	wg.Wait()
}

// Watch implements backend.Notifier: the waiter subscribes to the key's
// channel on every node (one shared pub/sub connection per node and
// Locker), with one rank on all of them, so that every node's release
// message wakes the same waiter. It returns once N − quorum + 1 nodes have
// confirmed — at least one of them is among any holder's quorum, whose
// release therefore reaches the waiter — or every node has answered or
// timed out, or ctx has ended; nodes that just failed are not waited for.
// The per-node subscriptions run on goroutines of their own under ctx, so a
// silent node never holds the caller past ctx.
func (d *driver) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	if d.closed.Load() {
		return ch, func() {}
	}
	channel := d.keys(key).Channel
	rank := redissub.NextRank()
	w := &watch{}
	need := len(d.nodes) - d.quorum + 1
	answers := make(chan bool, len(d.nodes))
	launched := 0
	for _, nd := range d.nodes {
		if nd.down(d) {
			continue
		}
		if d.bg.Go(func() {
			ok, cancel := nd.sub.WatchRank(ctx, channel, ch, rank)
			if ok && !w.add(cancel) {
				cancel()
			}
			answers <- ok
		}, false) {
			launched++
		}
	}
	for confirmed := 0; launched > 0 && confirmed < need; launched-- {
		select {
		case ok := <-answers:
			if ok {
				confirmed++
			}
		case <-ctx.Done():
			// The caller calls w.cancel, which also cancels the nodes
			// that confirm after this.
			return ch, w.cancel
		}
	}
	return ch, w.cancel
}

// watch collects the per-node cancels of one waiter.
type watch struct {
	mu        sync.Mutex
	cancelled bool
	cancels   []func()
}

// add records a node's cancel; false if the watch was cancelled already.
func (w *watch) add(cancel func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancelled {
		return false
	}
	w.cancels = append(w.cancels, cancel)
	return true
}

func (w *watch) cancel() {
	w.mu.Lock()
	cs := w.cancels
	w.cancels, w.cancelled = nil, true
	w.mu.Unlock()
	for _, c := range cs {
		c()
	}
}

// RefreshBatch implements backend.BatchRefresher: one pipeline per node,
// the nodes in parallel; each lock is extended if a quorum extended it
// within its validity.
func (d *driver) RefreshBatch(ctx context.Context, items []backend.RefreshItem) []error {
	errs := make([]error, len(items))
	var (
		mine []*lock
		idx  []int
		ttls []time.Duration
	)
	validity := time.Duration(1<<63 - 1)
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
		validity = min(validity, v)
		mine, idx, ttls = append(mine, l), append(idx, i), append(ttls, it.TTL)
	}
	if len(mine) == 0 {
		return errs
	}
	if d.closed.Load() {
		for _, i := range idx {
			errs[i] = backend.ErrClosed
		}
		return errs
	}
	ops := make([]redislua.RefreshOp, len(mine))
	for j, l := range mine {
		ops[j] = redislua.RefreshOp{Keys: l.keys, Owner: l.owner, Hold: l.hold, TTL: ttls[j]}
	}
	started := time.Now()
	deadline := started.Add(validity)
	n, q := len(d.nodes), d.quorum
	f := d.start(ctx, deadline, func(ctx context.Context, _ int, nd *node) nodeResult {
		res := redislua.RefreshBatch(ctx, nd.client, ops)
		out := nodeResult{out: yes, batch: make([]nodeBatchResult, len(res))}
		for j, r := range res {
			out.batch[j] = nodeBatchResult{held: r.Held, err: r.Err}
		}
		return out
	}, nil)
	// Done when every lock is decided: a quorum extended it, or a majority
	// no longer has it.
	rs, ctxDone := f.wait(ctx, n, func(rs []nodeResult) bool {
		for j := range mine {
			var t tally
			for _, r := range rs {
				switch {
				case r.batch == nil || r.batch[j].err != nil:
					t.failed++
				case r.batch[j].held:
					t.yes++
				default:
					t.no++
				}
			}
			if t.yes < q && t.no <= n-q {
				return false
			}
		}
		return true
	})
	f.finish(true)
	elapsed := time.Since(started)
	for j, l := range mine {
		var (
			per   []nodeResult
			valid = ttls[j] - d.drift(ttls[j])
		)
		for _, r := range rs {
			if r.batch == nil {
				per = append(per, r)
				continue
			}
			br := r.batch[j]
			switch {
			case br.err != nil:
				per = append(per, nodeResult{i: r.i, out: failed, err: br.err, nerr: d.nodeError(ctx, f.nctx, d.nodes[r.i], br.err)})
			case br.held:
				per = append(per, nodeResult{i: r.i, out: yes})
			default:
				per = append(per, nodeResult{i: r.i, out: no})
			}
		}
		errs[idx[j]] = l.refreshResult(ctx, per, ctxDone, f, elapsed, valid, deadline, started)
	}
	return errs
}

// Close stops the subscriptions, waits for background work (late answers,
// undo of failed or ambiguous attempts; each bounded by the per-node
// timeout, the clients' timeouts and at most 5s) and closes the clients if
// the driver owns them.
func (d *driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	for _, n := range d.nodes {
		_ = n.sub.Close()
	}
	d.bg.Close()
	if !d.owned {
		return nil
	}
	var errs []error
	for _, n := range d.nodes {
		if err := n.client.Close(); err != nil && !errors.Is(err, goredis.ErrClosed) {
			errs = append(errs, &NodeError{Addr: n.addr, Err: err})
		}
	}
	return errors.Join(errs...)
}

// lock is one hold granted by a quorum.
type lock struct {
	d     *driver
	keys  redislua.Keys
	owner string
	hold  string
	// pending has the nodes whose acquire was still running when the
	// quorum was in: a release on such a node must not overtake it. Nil if
	// there were none.
	pending *pendingNodes
	// unsure[i]: the acquire's answer from node i was lost (read after
	// pending.wait(i), if not nil, is closed).
	unsure []bool
}

// Token is always 0: Redlock has no fencing token (see the package
// documentation).
func (l *lock) Token() uint64 { return 0 }

// Release removes this hold on every node, in parallel. It succeeds when a
// quorum released it; ErrNotHeld when a majority no longer had it.
func (l *lock) Release(ctx context.Context) error {
	d := l.d
	started := time.Now()
	deadline := started.Add(max(d.nodeTimeout, MinReleaseWait))
	n, q := len(d.nodes), d.quorum
	f := d.start(ctx, deadline, func(ctx context.Context, i int, nd *node) nodeResult {
		if r, wait := l.afterAcquire(ctx, i, nd); wait {
			return r
		}
		r, err := redislua.Release(ctx, nd.client, l.keys, l.owner, 0, l.hold)
		switch {
		case err != nil:
			return nodeResult{out: failed, err: err}
		case r == redislua.NotHeld:
			if l.unsure[i] {
				// The acquire's answer was lost: it may land yet.
				d.bg.UndoAcquire(nd.client, l.keys, l.owner, 0, l.hold, redislua.UndoTimeout, true)
			}
			return nodeResult{out: no}
		}
		return nodeResult{out: yes}
	}, func(r nodeResult, _ bool) {
		if !r.queued && redislua.Ambiguous(r.err) {
			l.undo(r.i, true)
		}
	})
	// Decided once a quorum released the hold (the lock is then free for
	// the next owner: a quorum of nodes is) or a majority no longer had
	// it; the other nodes finish in the background.
	rs, ctxDone := f.wait(ctx, n, func(rs []nodeResult) bool {
		t := count(rs)
		return t.yes >= q || t.no > n-q
	})
	f.finish(true)
	for _, r := range rs {
		if !r.queued && redislua.Ambiguous(r.err) {
			l.undo(r.i, false)
		}
	}
	t := count(rs)
	switch {
	case t.yes >= q:
		return nil
	case t.no > n-q:
		return errNotHeld
	case ctxDone:
		return async.CtxError(ctx)
	}
	return d.unavailable("release", tally{t.yes, t.no, t.failed + len(f.timedOut())}, rs, f, deadline, started)
}

// undo removes this hold from node i in the background, after a release
// whose answer was lost.
func (l *lock) undo(i int, fromBackground bool) {
	nd := l.d.nodes[i]
	if l.unsure[i] {
		l.d.bg.UndoAcquire(nd.client, l.keys, l.owner, 0, l.hold, redislua.UndoTimeout, fromBackground)
	} else {
		l.d.bg.Undo(nd.client, l.keys, l.owner, 0, l.hold, redislua.UndoTimeout, fromBackground)
	}
}

// afterAcquire waits, on a node whose acquire of this hold is still
// running, for it to finish. If ctx ends first it arranges the undo for
// when it finishes and returns the result to report (wait true).
func (l *lock) afterAcquire(ctx context.Context, i int, nd *node) (nodeResult, bool) {
	p := l.pending.wait(i)
	if p == nil {
		return nodeResult{}, false
	}
	select {
	case <-p:
		return nodeResult{}, false
	case <-ctx.Done():
	}
	l.d.bg.Go(func() {
		<-p
		l.undo(i, true)
	}, true)
	return nodeResult{out: failed, err: ctx.Err(), queued: true}, true
}

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
	started := time.Now()
	deadline := started.Add(validity)
	n, q := len(d.nodes), d.quorum
	f := d.start(ctx, deadline, func(ctx context.Context, _ int, nd *node) nodeResult {
		held, err := redislua.Refresh(ctx, nd.client, l.keys, l.owner, 0, l.hold, ttl)
		switch {
		case err != nil:
			return nodeResult{out: failed, err: err}
		case !held:
			return nodeResult{out: no}
		}
		return nodeResult{out: yes}
	}, nil)
	rs, ctxDone := f.wait(ctx, n, func(rs []nodeResult) bool {
		t := count(rs)
		return t.yes >= q || t.no > n-q
	})
	f.finish(true)
	return l.refreshResult(ctx, rs, ctxDone, f, time.Since(started), validity, deadline, started)
}

// refreshResult decides a refresh from the nodes' answers.
func (l *lock) refreshResult(ctx context.Context, rs []nodeResult, ctxDone bool, f *fanout, elapsed, validity time.Duration, deadline, started time.Time) error {
	d := l.d
	n, q := len(d.nodes), d.quorum
	t := count(rs)
	switch {
	case t.yes >= q && elapsed < validity:
		return nil
	case t.no > n-q:
		return errNotHeld
	case ctxDone:
		return async.CtxError(ctx)
	case t.yes >= q:
		return fmt.Errorf("%w: a quorum extended the lock after %v, beyond the validity of %v", backend.ErrUnavailable, elapsed.Round(time.Microsecond), validity)
	}
	return d.unavailable("refresh", tally{t.yes, t.no, t.failed + len(f.timedOut())}, rs, f, deadline, started)
}
