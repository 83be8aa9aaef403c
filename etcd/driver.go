package etcd

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/holdtab"
	"github.com/distlock/distlock/internal/queuewait"
)

// driver implements backend.Driver, backend.Blocker, backend.Inspector,
// backend.ForceReleaser and backend.ErrorClassifier. Its mechanisms live in
// their own files: session.go (the session lease, keepalive and loss),
// acquire.go (the lock recipe), create.go (the waiter key's create and its
// undo), wait.go (watching the predecessor), lock.go (a held lock),
// holdwatch.go (the one watch that tells held locks of their key's deletion),
// holds.go (publishing the nested hold count), keys.go (the hold record
// and key names), admin.go (Inspect, ForceRelease) and errors.go (what
// errors mean). The table of local holds, their nesting and loss fan-out,
// and the acquisition loop are internal/holdtab's, shared with zookeeper.
type driver struct {
	cfg    *config
	client *clientv3.Client
	owned  bool

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	bg     *async.Group // keepalive loops, undo work

	mu       sync.Mutex
	closed   bool
	cur      *session
	granting chan struct{}         // closed when the grant under way ends; nil if none
	table    *holdtab.Table[*hold] // the holds of this driver, by key (keys.go)
	orphans  map[string]struct{}   // waiter keys whose create is being undone (undoCreate)
	hw       holdWatch             // the live holds and their watch (holdwatch.go)
	attempts queuewait.Attempts    // the attempts under way, by waiter key (a try waits behind its owner's)

	stats stats
}

// stats count server calls, for tests of the herd effect and traffic.
type stats struct {
	creates       atomic.Int64 // waiter keys created
	watches       atomic.Int64 // predecessor watches opened
	reads         atomic.Int64 // predecessor look-ups
	wakeups       atomic.Int64 // waiters woken by their predecessor's deletion
	compacted     atomic.Int64 // watches that found their start revision compacted
	keepalives    atomic.Int64 // keepalive requests sent
	sessions      atomic.Int64 // sessions lost
	holdWatch     atomic.Int64 // hold watch streams opened
	holdCompacted atomic.Int64 // hold watch streams that found their start revision compacted
	holdReads     atomic.Int64 // hold watch reads of held keys (after a restart, or of holds it did not cover)
}

func newDriver(cfg *config, client *clientv3.Client, owned bool) *driver {
	d := &driver{cfg: cfg, client: client, owned: owned, bg: async.NewGroup(), orphans: map[string]struct{}{}}
	d.hw.init()
	d.table = holdtab.New(&d.mu, d.detachLocked)
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d
}

// Capabilities implements backend.Driver.
func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, Notify: true, Fair: true, SessionBound: true, Durable: true}
}

// closeGrace bounds Close's revoke of the session lease and its wait for
// background work.
const closeGrace = 3 * time.Second

// Close stops the driver: it revokes the session lease (which deletes
// every key of the session, so its locks are freed at once; if the cluster
// cannot be reached they are freed when the lease expires), stops the
// keepalive and waits for background work, each within closeGrace, and
// closes an owned client.
func (d *driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	s := d.cur
	d.cur = nil
	d.mu.Unlock()
	if s != nil {
		d.endSession(s, nil)
		ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
		_, _ = d.client.Revoke(ctx, s.id)
		cancel()
	}
	d.cancel()
	d.bg.CloseWithin(closeGrace)
	if d.owned {
		return d.client.Close()
	}
	return nil
}

// spawn runs f in the background; false once Close has finished waiting.
func (d *driver) spawn(f func()) bool { return d.bg.GoChild(f) }

// testHooks let tests interfere at precise points.
type testHooks struct {
	afterCreate func(key string)             // the waiter key's create was answered
	keepalive   func() error                 // replaces a keepalive's outcome when it returns non-nil
	beforeWatch func(pred string, rev int64) // a waiter read its predecessor at rev and is about to watch it
	holdRestart func()                       // the hold watch's stream ended; it is about to read the held keys it listed
	holdOpen    func(from int64)             // the hold watch is about to open a stream from revision from
	holdEnded   func()                       // the hold watch's stream ended (before it decides to leave or set up again)
	headWait    func()                       // a try waits for an attempt of its owner at the head of the queue
	publish     func()                       // a hold's count is about to be written
}

func withHooks(h *testHooks) Option { return func(c *config) { c.hooks = h } }

// headWaitHook returns the headWait hook, nil if there is none.
func (d *driver) headWaitHook() func() {
	if h := d.cfg.hooks; h != nil {
		return h.headWait
	}
	return nil
}
