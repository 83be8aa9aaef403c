package zookeeper

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/holdtab"
	"github.com/distlock/distlock/internal/queuewait"
)

// driver implements backend.Driver, backend.Blocker and
// backend.ErrorClassifier, one mechanism per file (session.go, call.go,
// acquire.go, create.go, wait.go, lock.go, holds.go, keys.go, nodes.go,
// cleanup.go, errors.go); the table of local holds is internal/holdtab's.
type driver struct {
	cfg     *config
	servers []string // owned: what to dial
	owned   bool

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	kick   chan struct{} // wakes the monitor
	g      *async.Group  // requests to the server (call.go)
	bg     *async.Group  // background work: monitor, heartbeat, deletions

	mu       sync.Mutex
	closed   bool
	conn     *zk.Conn
	info     *connInfo // nil for a caller's conn not made by Connect
	cur      *session
	table    *holdtab.Table[*hold] // the holds of this driver, by key (keys.go)
	attempts queuewait.Attempts    // the attempts under way, by guid (a try waits behind its owner's)

	stats stats
}

// stats count server calls, for tests of the herd effect.
type stats struct {
	children    atomic.Int64 // getChildren calls
	watches     atomic.Int64 // predecessor watches set
	watchEvents atomic.Int64 // predecessor watches fired
	creates     atomic.Int64
	sessions    atomic.Int64 // sessions lost
}

// newDriver returns a running driver for a checked cfg: over the caller's
// conn, or, when conn is nil, over a connection of its own to servers,
// which it dials (without waiting for it).
func newDriver(cfg *config, conn *zk.Conn, servers []string) (*driver, error) {
	d := &driver{cfg: cfg, servers: servers, owned: conn == nil, kick: make(chan struct{}, 1),
		g: async.NewGroup(), bg: async.NewGroup()}
	d.table = holdtab.New(&d.mu, d.detachLocked)
	if d.owned {
		c, _, info, err := connect(servers, cfg)
		if err != nil {
			return nil, err
		}
		d.conn, d.info = c, info
	} else {
		d.conn, d.info = conn, lookupInfo(conn)
		if d.info == nil && cfg.sessionTimeout == 0 {
			return nil, fmt.Errorf("%w: zookeeper: New: the session timeout of a *zk.Conn not made by zookeeper.Connect cannot be read back: pass WithSessionTimeout", backend.ErrInvalidOption)
		}
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.bg.Go(d.monitor)
	return d, nil
}

// spawn runs f in the background. As for background work already running,
// f may still start while Close waits for that work (a deletion decided
// then still runs, within Close's bound); it is refused once Close has
// finished waiting for it.
func (d *driver) spawn(f func()) bool { return d.bg.GoChild(f) }

// Capabilities implements backend.Driver.
func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, Notify: true, Fair: true, SessionBound: true, Durable: true}
}

// closeGrace bounds how long Close waits for background deletions on a
// caller's connection, and then again for requests still pending on it.
const closeGrace = 5 * time.Second

// Close stops the driver. An owned connection is closed, which ends its
// session and so deletes its nodes; on a caller's connection, background
// deletions get up to closeGrace to finish (their requests still run), then
// requests still pending get up to closeGrace.
func (d *driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	conn := d.conn
	if d.owned {
		d.conn, d.info = nil, nil
	}
	d.mu.Unlock()
	if d.owned {
		d.cancel()
		if conn != nil {
			conn.Close()
		}
		d.bg.Close()
		d.g.Close() // every request ends: the connection is closed
		return nil
	}
	d.bg.CloseWithin(closeGrace)
	d.cancel() // ends deletions still trying, and waits for requests
	d.g.CloseWithin(closeGrace)
	return nil
}

func (d *driver) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// testHooks let tests interfere at precise points.
type testHooks struct {
	beforeCreate      func(parent string)
	afterCreate       func(path string) // an attempt's node was created: it is about to look at the queue
	sessionLost       func(id int64, cause string)
	beforeForceDelete func(path string) // ForceRelease read the holder at path
	headWait          func()            // a try waits for an attempt of its owner at the head of the queue
	publish           func()            // a hold's count is about to be written
	permitWait        func()            // a permit wait found no permit free: it is about to wait for a change
}

func withHooks(h *testHooks) Option { return func(c *config) { c.hooks = h } }

// headWaitHook returns the headWait hook, nil if there is none.
func (d *driver) headWaitHook() func() {
	if h := d.cfg.hooks; h != nil {
		return h.headWait
	}
	return nil
}
