package memcached

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
)

// New returns a Locker over client. It checks every option (an error wraps
// ErrInvalidOption and names the option) and refuses a nil client; it never
// connects: an unreachable server shows at the first acquisition. The
// Locker does not own the client (see WithCloseClient). Without
// WithSelector, releases use the gets+cas tombstone (ReleaseCAS) and there
// is no server-list guard. The client's Timeout bounds every request
// (memcache.DefaultTimeout, 500ms, if zero); contexts are honoured on top
// of it. After an I/O error the Locker drops the client's idle connections
// (memcache.Client.Close, after which the client stays usable): after a
// server restart every pooled connection is dead.
func New(client *memcache.Client, opts ...Option) (*distlock.Locker, error) {
	d, err := newDriver(client, opts)
	if err != nil {
		return nil, err
	}
	return distlock.New(d, "memcached", d.defaults...), nil
}

const (
	// casRetries bounds the read-modify-write loops of one operation.
	// Conflicts come only from nested holds of the same owner.
	casRetries = 16
	// casWindow bounds an acquisition's compare-and-swap loop past
	// casRetries tries.
	casWindow = 2 * time.Second
	// maxHolds bounds one owner's nested holds of one lock, which keeps
	// the item far below memcached's 1 MB limit.
	maxHolds = 4096
)

type driver struct {
	c           *memcache.Client
	prefix      string
	release     ReleaseMode
	timeout     time.Duration
	closeClient bool
	defaults    []distlock.Option // New's WithDefaults
	servers                       // the server of each key, where known

	g *async.Group // work that outlives its call: late results, undos

	mu     sync.Mutex
	closed bool
	ops    sync.WaitGroup // operations under way; Close waits for them

	// batchHook, if set (by tests), runs in RefreshBatch between a
	// server's gets and its cas commands.
	batchHook func(addr net.Addr)
	// forceHook, if set (by tests), runs in ForceRelease between the read
	// of the item and its compare-and-delete.
	forceHook func()
}

// newDriver is the one constructor behind New and the URL opener: it checks
// opts (newConfig) and the client.
func newDriver(c *memcache.Client, opts []Option) (*driver, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, fmt.Errorf("%w: memcached: New(nil): want a *memcache.Client", backend.ErrInvalidOption)
	}
	d := &driver{
		c:           c,
		prefix:      cfg.prefix,
		release:     cfg.release,
		timeout:     memcache.DefaultTimeout,
		closeClient: cfg.closeClient,
		defaults:    cfg.defaults,
		g:           async.NewGroup(),
	}
	if c.Timeout > 0 {
		d.timeout = c.Timeout
	}
	d.pin = cfg.pin
	d.knowServers(c, cfg.selector, d.timeout, d.g)
	return d, nil
}

func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Reentrant: true, Expiring: true}
}

// Close waits for the operations under way and for the background work
// (each bounded by the client's timeout; an undo makes one last try), then
// closes the Locker's own connections, and the client's idle ones with
// WithCloseClient.
func (d *driver) Close() error {
	d.mu.Lock()
	again := d.closed
	d.closed = true
	d.mu.Unlock()
	if again {
		return nil
	}
	d.ops.Wait()
	d.g.Close()
	if d.raw != nil {
		d.raw.close()
	}
	if d.closeClient {
		return d.c.Close()
	}
	return nil
}

// call runs op within ctx, as an operation that Close waits for.
// gomemcache has no contexts, so op runs through async.Call: call returns
// ctx's error as soon as ctx ends, op goes on until the client's I/O
// timeout stops it, and then late (if not nil) gets its result, to undo a
// grant nobody will use.
func call[T any](d *driver, ctx context.Context, op func(context.Context) (T, error), late func(T, error)) (T, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		var zero T
		return zero, backend.ErrClosed
	}
	d.ops.Add(1)
	d.mu.Unlock()
	defer d.ops.Done()
	v, _, err := async.Call(d.g, ctx, op, late)
	return v, err
}
