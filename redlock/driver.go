package redlock

import (
	"errors"
	"fmt"
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
// New does not connect. It returns an error wrapping
// distlock.ErrInvalidOption, and no Locker, if clients is empty, contains
// nil or the same client twice, or an option's value is out of range (see
// each option); it never panics.
func New(clients []goredis.UniversalClient, opts ...Option) (*distlock.Locker, error) {
	c := newConfig(opts)
	nodes := make([]*node, len(clients))
	for i, cl := range clients {
		nodes[i] = &node{addr: addrOf(cl, i), client: cl}
	}
	d, err := newDriver(nodes, c)
	if err != nil {
		return nil, err
	}
	return distlock.New(d, "redlock", c.defaults...), nil
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
	// batch sends acquire, release and refresh: the node's requests made
	// while one is in flight go out together, as one pipeline.
	batch *redislua.Batch
	// downUntil (ns on the driver's monotonic clock) marks a node that just
	// failed with an I/O error: Watch does not wait for its subscription
	// confirmation meanwhile.
	downUntil atomic.Int64
}

func (n *node) markDown(d *driver) {
	n.downUntil.Store(int64(time.Since(d.base) + time.Second))
}

func (n *node) down(d *driver) bool {
	return int64(time.Since(d.base)) < n.downUntil.Load()
}

// driver implements backend.Driver, Notifier, TTLPolicy, BatchRefresher and
// ErrorClassifier.
type driver struct {
	nodes       []*node
	quorum      int
	prefix      string
	nodeTimeout time.Duration
	driftFactor float64
	driftMin    time.Duration
	owned       bool
	holds       *redislua.HoldSource
	// g runs the node round trips that outlive their caller and the undo
	// of failed or ambiguous operations (undoer, which bounds them).
	g       *async.Group
	undoer  *redislua.Undoer
	base    time.Time // for node.downUntil
	runners sync.Pool // of *runner
	// releasing: the releases and failed attempts still running on some
	// nodes after their decision, which an acquire of the same lock waits
	// for node by node.
	releasing releasing
	closed    atomic.Bool
	// waiting: the waiters queued on each lock (WatchHeld), whose
	// attempts go to the lock's gate node first (see gate).
	waiting waiting
	// onAttempt, if set (tests only, before use), is told every acquire
	// attempt's answers at its decision.
	onAttempt func(tally)
}

var (
	_ backend.Driver          = (*driver)(nil)
	_ backend.Notifier        = (*driver)(nil)
	_ backend.HeldNotifier    = (*driver)(nil)
	_ backend.Permitter       = (*driver)(nil)
	_ backend.TTLPolicy       = (*driver)(nil)
	_ backend.BatchRefresher  = (*driver)(nil)
	_ backend.ErrorClassifier = (*driver)(nil)
)

// newDriver checks the nodes and the configuration (the one validating path
// of New and the URL opener) and returns the driver over them.
func newDriver(nodes []*node, c config) (*driver, error) {
	if err := checkNodes(nodes); err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	g := async.NewGroup()
	d := &driver{
		nodes:       nodes,
		quorum:      len(nodes)/2 + 1,
		prefix:      c.prefix,
		nodeTimeout: c.nodeTimeout,
		driftFactor: c.driftFactor,
		driftMin:    c.driftMin,
		owned:       c.closeClients,
		holds:       redislua.NewHoldSource(),
		g:           g,
		undoer:      redislua.NewUndoerOn(g, maxUndoPerNode*len(nodes)),
		base:        time.Now(),
	}
	for _, n := range nodes {
		n.sub = redissub.NewSubscriber(n.client, c.subscriberOptions())
		n.batch = redislua.NewPatientBatch(n.client, g)
	}
	return d, nil
}

// checkNodes refuses no nodes, a nil client and a client given twice.
func checkNodes(nodes []*node) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: redlock: New: %s", backend.ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	if len(nodes) == 0 {
		return bad("no clients: Redlock needs at least one Redis master")
	}
	for i, n := range nodes {
		if n.client == nil {
			return bad("client %d is nil", i)
		}
		for _, prev := range nodes[:i] {
			if prev.client == n.client {
				return bad("client %d is given twice: the quorum needs independent masters", i)
			}
		}
	}
	return nil
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
	k.Fence, k.Legacy = "", ""
	return k
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
	d.g.Close()
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
