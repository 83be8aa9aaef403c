package memcached

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

// MinTTL is the shortest TTL the backend accepts. memcached counts expiry
// in whole seconds on a clock that ticks once a second, so a lock can vanish
// up to a second before its TTL: 2 s is the least that leaves a positive
// validity (see ExpiryGranularity).
const MinTTL = 2 * time.Second

// MaxTTL is the longest TTL the backend accepts: 30 days (2,592,000 s).
// memcached reads a larger expiry as an absolute Unix time, so 30 days and
// one second would expire at once; distlock refuses it (ErrInvalidTTL)
// rather than convert it with a client clock the server does not share.
const MaxTTL = 30 * 24 * time.Hour

// maxRelative is MaxTTL in seconds, the largest relative memcached expiry.
const maxRelative = int64(MaxTTL / time.Second)

// ExpiryGranularity is memcached's expiry resolution, one tick of its
// clock. A lease's local validity is its TTL less this much.
//
// memcached stores an item with expiry n at its clock's current second c
// and drops it at the first tick that reads c+n or more. The clock reads the
// whole monotonic seconds at each tick, and each tick re-arms the next one
// second after itself, so the ticks drift later (measured on a busy
// machine: 1.5 to 2.6 ms per tick, a crossing every 6 to 11 minutes) and
// when their phase crosses a whole second the clock jumps by two. An item
// stored with expiry n therefore lives between n−1 and n seconds, but
// between n−2 and n−1 seconds if such a jump falls in its lifetime (an item
// with expiry 2 stored just before a jump lived 11 ms). To keep the validity of ttl − 1 s true in either case,
// every expiry sent to memcached is the TTL plus this one tick: a lock
// lives between ttl − 1 s (at a jump) and ttl + 1 s, and normally more
// than ttl.
const ExpiryGranularity = time.Second

const (
	// casRetries bounds the read-modify-write loops of one operation.
	// Conflicts come only from nested holds of the same owner.
	casRetries = 16
	// maxHolds bounds one owner's nested holds of one lock, which keeps
	// the item far below memcached's 1 MB limit.
	maxHolds = 4096
	// undoSettle is how long the background cleanup of an acquisition
	// with an unknown outcome keeps looking for the record after the
	// server first answered that it is not there: a request still queued
	// on a connection the server has not read yet may land late.
	undoSettle = 2 * time.Second
)

// ReleaseMode selects how the last hold of a lock is deleted.
type ReleaseMode int

const (
	// ReleaseAuto deletes with the meta protocol's compare-and-delete
	// (md <key> C<cas>) where the Locker knows which server holds the key
	// (URL opener, or WithSelector) and the server speaks the meta
	// protocol (memcached 1.6+); otherwise as ReleaseCAS. The default.
	ReleaseAuto ReleaseMode = iota
	// ReleaseCAS replaces the item, by compare-and-swap, with an empty
	// tombstone whose expiry is in the past, so it is gone at once. It
	// needs no meta protocol, but the tombstone needs a free chunk, so with
	// -M and a full slab class it fails where md would succeed.
	ReleaseCAS
)

// String returns the mode's name in URLs: "auto" or "cas".
func (m ReleaseMode) String() string {
	if m == ReleaseCAS {
		return "cas"
	}
	return "auto"
}

func parseRelease(s string) (ReleaseMode, error) {
	switch s {
	case "auto":
		return ReleaseAuto, nil
	case "cas":
		return ReleaseCAS, nil
	}
	return 0, fmt.Errorf("want auto or cas")
}

// PinMode selects the server-list guard (see the package documentation).
type PinMode int

const (
	// PinCheck records the Locker's server list on each server the first
	// time it takes a lock there, and refuses (ErrInvalidOption) to take
	// locks on a server that records a different list. The default.
	PinCheck PinMode = iota
	// PinReset overwrites the record with the Locker's server list. Use it
	// once, after every holder under the old list is gone, to change the
	// list on purpose.
	PinReset
	// PinOff skips the guard.
	PinOff
)

// String returns the mode's name in URLs: "check", "reset" or "off".
func (m PinMode) String() string {
	switch m {
	case PinReset:
		return "reset"
	case PinOff:
		return "off"
	}
	return "check"
}

func parsePin(s string) (PinMode, error) {
	switch s {
	case "check":
		return PinCheck, nil
	case "reset":
		return PinReset, nil
	case "off":
		return PinOff, nil
	}
	return 0, fmt.Errorf("want check, reset or off")
}

// Option configures New.
type Option func(*config)

type config struct {
	defaults    []distlock.Option
	prefix      string
	selector    memcache.ServerSelector
	release     ReleaseMode
	pin         PinMode
	closeClient bool
}

// WithDefaults sets options applied to every acquisition of the Locker
// (passed to distlock.New), such as distlock.WithTTL.
func WithDefaults(opts ...distlock.Option) Option {
	return func(c *config) { c.defaults = append(c.defaults, opts...) }
}

// WithPrefix sets the prefix of every memcached key the Locker uses
// (default DefaultPrefix). Lockers must use the same prefix to contend for
// the same locks. It must be at most 200 bytes without whitespace or control
// bytes; otherwise every acquisition fails with ErrInvalidOption.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithSelector tells the Locker which ServerSelector the client was built
// with (memcache.NewFromSelector), so it can reach the server that holds a
// key on its own connections. That enables the meta-protocol
// compare-and-delete (ReleaseAuto) and the server-list guard (WithPin). It
// must be the client's own selector: the Locker assumes both pick the same
// server for a key.
func WithSelector(ss memcache.ServerSelector) Option {
	return func(c *config) { c.selector = ss }
}

// WithRelease selects how the last hold of a lock is deleted (default
// ReleaseAuto).
func WithRelease(m ReleaseMode) Option {
	return func(c *config) { c.release = m }
}

// WithPin sets the server-list guard (default PinCheck). It needs
// WithSelector; without one there is no guard.
func WithPin(m PinMode) Option {
	return func(c *config) { c.pin = m }
}

// WithCloseClient makes Close close the client's idle connections. By
// default New does not take ownership of the caller's client.
func WithCloseClient() Option {
	return func(c *config) { c.closeClient = true }
}

// Locker is a distlock.Locker on memcached.
type Locker struct {
	distlock.Locker
	d *driver
}

// New returns a Locker over client. The Locker does not own the client
// (see WithCloseClient) and does not connect until the first acquisition.
// Without WithSelector, releases use the gets+cas tombstone (ReleaseCAS)
// and there is no server-list guard. The client's Timeout bounds every
// request (memcache.DefaultTimeout, 500ms, if zero); contexts are honoured
// on top of it. After an I/O error the Locker drops the client's idle
// connections (memcache.Client.Close, after which the client stays usable):
// after a server restart every pooled connection is dead.
func New(client *memcache.Client, opts ...Option) *Locker {
	cfg := config{prefix: DefaultPrefix}
	for _, o := range opts {
		o(&cfg)
	}
	d := newDriver(client, cfg)
	return &Locker{Locker: distlock.New(d, "memcached", cfg.defaults...), d: d}
}

// ItemKey returns the memcached key under which this Locker stores the lock
// named key, for inspection with other tools.
func (l *Locker) ItemKey(key string) string { return ItemKey(l.d.prefix, key) }

// Counters of the final-release paths, for tests.
var (
	statMetaDeletes atomic.Int64
	statTombstones  atomic.Int64
)

type driver struct {
	c           *memcache.Client
	sel         memcache.ServerSelector // nil: unknown
	raw         *rawPool                // nil without sel
	prefix      string
	release     ReleaseMode
	pin         PinMode
	servers     string // the server list, as recorded by the pin
	timeout     time.Duration
	closeClient bool
	cfgErr      error

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	bg     context.Context
	stopBG context.CancelFunc

	pinMu  sync.RWMutex
	pinned map[string]bool
	noMeta sync.Map // server address → true when it lacks the meta protocol

	// batchHook, if set (by tests), runs in RefreshBatch between a
	// server's gets and its cas commands.
	batchHook func(addr net.Addr)
}

func newDriver(c *memcache.Client, cfg config) *driver {
	d := &driver{
		c:           c,
		sel:         cfg.selector,
		prefix:      cfg.prefix,
		release:     cfg.release,
		pin:         cfg.pin,
		closeClient: cfg.closeClient,
		pinned:      map[string]bool{},
		timeout:     memcache.DefaultTimeout,
	}
	d.bg, d.stopBG = context.WithCancel(context.Background())
	if err := checkPrefix(cfg.prefix); err != nil {
		d.cfgErr = fmt.Errorf("%w: %v", backend.ErrInvalidOption, err)
	}
	if c == nil {
		d.cfgErr = fmt.Errorf("%w: nil *memcache.Client", backend.ErrInvalidOption)
		return d
	}
	if c.Timeout > 0 {
		d.timeout = c.Timeout
	}
	if d.sel != nil {
		idle := c.MaxIdleConns
		if idle <= 0 {
			idle = memcache.DefaultMaxIdleConns
		}
		d.raw = newRawPool(c.DialContext, d.timeout, idle)
		var addrs []string
		_ = d.sel.Each(func(a net.Addr) error {
			addrs = append(addrs, a.String())
			return nil
		})
		d.servers = strings.Join(addrs, ",")
	}
	return d
}

func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Reentrant: true, Expiring: true}
}

// Validity implements backend.TTLPolicy: TTLs are whole seconds from MinTTL
// to MaxTTL, and the lock is certainly held for ttl less one second.
func (d *driver) Validity(ttl time.Duration) (time.Duration, error) { return validity(ttl) }

func validity(ttl time.Duration) (time.Duration, error) {
	switch {
	case ttl < MinTTL:
		return 0, fmt.Errorf("%w: %v is below memcached's minimum of %v (expiry counts whole seconds on a 1-second clock)", backend.ErrInvalidTTL, ttl, MinTTL)
	case ttl%time.Second != 0:
		return 0, fmt.Errorf("%w: %v is not a whole number of seconds (memcached expiry is in seconds; distlock does not round)", backend.ErrInvalidTTL, ttl)
	case ttl > MaxTTL:
		return 0, fmt.Errorf("%w: %v exceeds memcached's 30-day limit for relative expiry (%v)", backend.ErrInvalidTTL, ttl, MaxTTL)
	}
	// The item lives at least its expiry less two ticks; the expiry is
	// ttl + 1s except at MaxTTL, where the padding does not fit.
	served := time.Duration(ttlSeconds(ttl))*time.Second - 2*ExpiryGranularity
	return min(ttl-ExpiryGranularity, served), nil
}

// ttlSeconds is the memcached expiry for a new item with ttl: ttl plus one
// tick (ExpiryGranularity), at most 30 days.
func ttlSeconds(ttl time.Duration) int32 {
	return int32(min(int64(ttl/time.Second)+1, maxRelative))
}

// expSeconds is the memcached expiry for an item that must be held until
// expMs (Unix ms) seen at nowMs: the remaining time rounded up, plus one
// tick, at least 1 and at most 30 days (a larger number would be read as an
// absolute time).
func expSeconds(expMs, nowMs int64) int32 {
	s := (expMs-nowMs+999)/1000 + 1
	return int32(min(max(s, 1), maxRelative))
}

func (d *driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.stopBG()
	d.wg.Wait()
	if d.raw != nil {
		d.raw.close()
	}
	if d.closeClient && d.c != nil {
		return d.c.Close()
	}
	return nil
}

// begin registers an operation; Close waits for every one of them.
func (d *driver) begin() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return backend.ErrClosed
	}
	d.wg.Add(1)
	return nil
}

// run runs op within ctx. gomemcache has no contexts, so when ctx can end,
// op runs on its own goroutine and run returns ctx's error as soon as ctx
// ends; op goes on until the client's I/O timeout stops it, and then
// abandoned (if not nil) gets its result, to undo a grant nobody will use.
func run[T any](d *driver, ctx context.Context, op func(context.Context) (T, error), abandoned func(T, error)) (T, error) {
	var zero T
	if err := d.begin(); err != nil {
		return zero, err
	}
	defer d.wg.Done()
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if ctx.Done() == nil {
		return op(ctx)
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		v, err := op(ctx)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		if abandoned != nil {
			d.wg.Add(1)
			go func() {
				defer d.wg.Done()
				r := <-ch
				abandoned(r.v, r.err)
			}()
		}
		return zero, ctx.Err()
	}
}

// errOutOfMemory marks memcached's "SERVER_ERROR out of memory" (a server
// started with -M whose slab class is full).
var errOutOfMemory = errors.New("memcached is out of memory and may not evict (-M)")

// Reasons for ErrNotHeld.
var (
	errGone    = fmt.Errorf("%w: the lock expired or was evicted", backend.ErrNotHeld)
	errNotOurs = fmt.Errorf("%w: the lock is held by another owner or tenure", backend.ErrNotHeld)
)

func isOOM(err error) bool {
	return err != nil && strings.Contains(err.Error(), "SERVER_ERROR out of memory")
}

// serverAnswered reports whether err is a reply from the server (so the
// request is known not to have been applied), as gomemcache reports
// SERVER_ERROR and CLIENT_ERROR replies only as text.
func serverAnswered(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "SERVER_ERROR") || strings.Contains(msg, "CLIENT_ERROR") ||
		strings.Contains(msg, "unexpected response line")
}

// ioError reports whether err is an I/O failure on a connection that was
// established: the request may have reached the server (its outcome is
// unknown), and a retry on a fresh connection may succeed. Failed dials,
// server replies and context ends are not.
func ioError(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case errors.Is(err, backend.ErrNotAcquired), errors.Is(err, backend.ErrNotHeld),
		errors.Is(err, backend.ErrInvalidOption), errors.Is(err, backend.ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, errPoolClosed),
		errors.Is(err, memcache.ErrCacheMiss), errors.Is(err, memcache.ErrCASConflict),
		errors.Is(err, memcache.ErrNotStored), errors.Is(err, memcache.ErrMalformedKey),
		errors.Is(err, memcache.ErrNoServers), errors.Is(err, memcache.ErrServerError):
		return false
	}
	var cte *memcache.ConnectTimeoutError
	if errors.As(err, &cte) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	var reply *errReply
	if errors.As(err, &reply) {
		return false
	}
	return !serverAnswered(err)
}

// classify puts an error from the client into distlock's form: sentinels
// and context errors as they are, everything else wrapped in ErrUnavailable
// with the client's error still reachable.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, backend.ErrNotAcquired), errors.Is(err, backend.ErrNotHeld),
		errors.Is(err, backend.ErrInvalidOption), errors.Is(err, backend.ErrUnavailable),
		errors.Is(err, backend.ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, errPoolClosed):
		return fmt.Errorf("%w: %w", backend.ErrClosed, err)
	case isOOM(err):
		return fmt.Errorf("%w: %w: %w", backend.ErrUnavailable, errOutOfMemory, err)
	}
	return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
}

// flushIdle drops the idle connections after an I/O error: after a server
// restart every pooled connection is dead, and gomemcache would otherwise
// fail once on each of them.
func (d *driver) flushIdle() {
	_ = d.c.Close() // closes idle connections only; the client stays usable
	if d.raw != nil {
		d.raw.flush()
	}
}

func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if d.cfgErr != nil {
		return nil, d.cfgErr
	}
	if _, err := validity(req.TTL); err != nil {
		return nil, err
	}
	key := ItemKey(d.prefix, req.Key)
	l, err := run(d, ctx, func(ctx context.Context) (*lock, error) {
		if err := d.ensurePinned(ctx, key); err != nil {
			return nil, classify(err)
		}
		l, err := d.acquireOnce(key, req)
		if ioError(err) && ctx.Err() == nil {
			// Most likely a pooled connection to a restarted server. The
			// first attempt is undone in the background (acquireOnce saw
			// to it); its unique hold id keeps the two apart.
			d.flushIdle()
			l, err = d.acquireOnce(key, req)
		}
		return l, classify(err)
	}, func(l *lock, _ error) {
		if l != nil { // granted after the caller gave up
			d.undo(l.key, l.owner, l.tenure, l.hold, req.TTL)
		}
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// acquireOnce is one acquisition: add the item; if it exists and the same
// owner holds it, add a hold by compare-and-swap; otherwise report the
// holder's remaining time. When the outcome of a write is unknown it starts
// the background undo of that write's hold.
func (d *driver) acquireOnce(key string, req backend.Request) (*lock, error) {
	ttlMs := req.TTL.Milliseconds()
	hold := randomID(holdBytes)
	for range casRetries {
		now := time.Now().UnixMilli()
		rec := record{expMs: now + ttlMs, tenure: randomID(tenureBytes), holds: []string{hold}, owner: req.Owner}
		err := d.c.Add(&memcache.Item{Key: key, Value: rec.encode(), Expiration: ttlSeconds(req.TTL)})
		if err == nil {
			return d.newLock(key, req, rec.tenure, hold), nil
		}
		if !errors.Is(err, memcache.ErrNotStored) {
			if ioError(err) {
				d.undo(key, req.Owner, rec.tenure, hold, req.TTL)
			}
			return nil, err
		}
		it, err := d.c.Get(key)
		if errors.Is(err, memcache.ErrCacheMiss) {
			continue // freed in between: add again
		}
		if err != nil {
			return nil, err
		}
		cur, ok := decodeRecord(it.Value)
		if !ok {
			return nil, fmt.Errorf("%w: the item %s holds a value distlock did not write", backend.ErrNotAcquired, key)
		}
		if cur.owner != req.Owner {
			return nil, backend.Busy(time.Duration(max(cur.expMs-now, 0)) * time.Millisecond)
		}
		if len(cur.holds) >= maxHolds {
			return nil, fmt.Errorf("%w: the owner already holds this lock %d times (the limit)", backend.ErrNotAcquired, len(cur.holds))
		}
		cur.holds = append(cur.holds, hold)
		cur.expMs = max(cur.expMs, now+ttlMs) // never shorten
		it.Value, it.Expiration = cur.encode(), expSeconds(cur.expMs, now)
		err = d.c.CompareAndSwap(it)
		switch {
		case err == nil:
			return d.newLock(key, req, cur.tenure, hold), nil
		case errors.Is(err, memcache.ErrCASConflict), errors.Is(err, memcache.ErrNotStored), errors.Is(err, memcache.ErrCacheMiss):
			continue
		}
		if ioError(err) {
			d.undo(key, req.Owner, cur.tenure, hold, req.TTL)
		}
		return nil, err
	}
	return nil, backend.Busy(0)
}

func (d *driver) newLock(key string, req backend.Request, tenure, hold string) *lock {
	l := &lock{d: d, key: key, owner: req.Owner, tenure: tenure, hold: hold}
	l.ttl.Store(int64(req.TTL))
	return l
}

// removeHold is the owner-checked release of one hold: it changes the item
// only if it still records owner, tenure and hold, and deletes it (meta
// compare-and-delete, or tombstone) when hold is the last one.
func (d *driver) removeHold(ctx context.Context, key, owner, tenure, hold string) error {
	for range casRetries {
		it, err := d.c.Get(key)
		if errors.Is(err, memcache.ErrCacheMiss) {
			return errGone
		}
		if err != nil {
			return err
		}
		cur, ok := decodeRecord(it.Value)
		if !ok || cur.owner != owner || cur.tenure != tenure || !cur.has(hold) {
			return errNotOurs
		}
		if len(cur.holds) > 1 {
			cur.holds = cur.without(hold)
			it.Value, it.Expiration = cur.encode(), expSeconds(cur.expMs, time.Now().UnixMilli())
			err := d.c.CompareAndSwap(it)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, memcache.ErrCASConflict):
				continue
			case errors.Is(err, memcache.ErrNotStored), errors.Is(err, memcache.ErrCacheMiss):
				return errGone
			}
			return err
		}
		if addr, ok := d.metaServer(key); ok {
			res, err := d.raw.metaDelete(ctx, addr, key, it.CasID)
			if err != nil {
				return err
			}
			switch res {
			case mdDeleted:
				statMetaDeletes.Add(1)
				return nil
			case mdExists:
				continue
			case mdNotFound:
				return errGone
			}
			d.noMeta.Store(addr.String(), true) // fall back to the tombstone
		}
		// A compare-and-swap to an empty value that expired a second ago:
		// memcached treats the item as gone at once.
		it.Value, it.Expiration = nil, -1
		err = d.c.CompareAndSwap(it)
		switch {
		case err == nil:
			statTombstones.Add(1)
			return nil
		case errors.Is(err, memcache.ErrCASConflict):
			continue
		case errors.Is(err, memcache.ErrNotStored), errors.Is(err, memcache.ErrCacheMiss):
			return errGone
		}
		return err
	}
	return fmt.Errorf("%w: %d compare-and-swap conflicts in a row", backend.ErrUnavailable, casRetries)
}

// metaServer returns the server of key if the final release should use the
// meta protocol there.
func (d *driver) metaServer(key string) (net.Addr, bool) {
	if d.release == ReleaseCAS || d.raw == nil {
		return nil, false
	}
	addr, err := d.sel.PickServer(key)
	if err != nil {
		return nil, false
	}
	if _, no := d.noMeta.Load(addr.String()); no {
		return nil, false
	}
	return addr, true
}

// extendHold is the owner-checked refresh: it rewrites the item by
// compare-and-swap with an expiry of max(remaining, ttl), only if it still
// records owner, tenure and hold.
func (d *driver) extendHold(key, owner, tenure, hold string, ttl time.Duration) error {
	for range casRetries {
		it, err := d.c.Get(key)
		if errors.Is(err, memcache.ErrCacheMiss) {
			return errGone
		}
		if err != nil {
			return err
		}
		cur, ok := decodeRecord(it.Value)
		if !ok || cur.owner != owner || cur.tenure != tenure || !cur.has(hold) {
			return errNotOurs
		}
		now := time.Now().UnixMilli()
		cur.expMs = max(cur.expMs, now+ttl.Milliseconds())
		it.Value, it.Expiration = cur.encode(), expSeconds(cur.expMs, now)
		err = d.c.CompareAndSwap(it)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, memcache.ErrCASConflict):
			continue
		case errors.Is(err, memcache.ErrNotStored), errors.Is(err, memcache.ErrCacheMiss):
			return errGone
		}
		return err
	}
	return fmt.Errorf("%w: %d compare-and-swap conflicts in a row", backend.ErrUnavailable, casRetries)
}

// undo removes one hold in the background, for an acquisition whose
// outcome is unknown (or that was granted after its caller gave up) and for
// a release that could not reach the server. It retries until the hold is
// gone, until the server has said for undoSettle that it is not there (a
// request still queued on an old connection may land late), until no server
// listens any more (a queued request died with its process), until the TTL
// has run out anyway, or until Close. The caller holds a d.wg count.
func (d *driver) undo(key, owner, tenure, hold string, ttl time.Duration) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		deadline := time.Now().Add(ttl + 2*ExpiryGranularity)
		var answered time.Time
		pause := 20 * time.Millisecond
		for {
			ctx, cancel := context.WithTimeout(d.bg, 3*d.timeout)
			err := d.removeHold(ctx, key, owner, tenure, hold)
			cancel()
			switch {
			case err == nil:
				return
			case errors.Is(err, backend.ErrNotHeld):
				if answered.IsZero() {
					answered = time.Now()
				}
				if time.Since(answered) >= undoSettle {
					return
				}
			case errors.Is(err, syscall.ECONNREFUSED):
				return
			case ioError(err):
				d.flushIdle()
			}
			if time.Now().After(deadline) {
				return
			}
			select {
			case <-d.bg.Done():
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, time.Second)
		}
	}()
}

// ensurePinned runs the server-list guard for the server of key, once per
// server and Locker.
func (d *driver) ensurePinned(ctx context.Context, key string) error {
	if d.pin == PinOff || d.raw == nil {
		return nil
	}
	addr, err := d.sel.PickServer(key)
	if err != nil {
		return err
	}
	s := addr.String()
	d.pinMu.RLock()
	ok := d.pinned[s]
	d.pinMu.RUnlock()
	if ok {
		return nil
	}
	if err := d.pinServer(ctx, addr); err != nil {
		return err
	}
	d.pinMu.Lock()
	d.pinned[s] = true
	d.pinMu.Unlock()
	return nil
}

const pinMagic = "distlock-servers "

// pinServer records the Locker's server list on addr (add, no expiry), or
// checks that the list recorded there is the same.
func (d *driver) pinServer(ctx context.Context, addr net.Addr) error {
	mk := pinKey(d.prefix)
	want := []byte(pinMagic + d.servers)
	if d.pin == PinReset {
		_, err := d.raw.store(ctx, addr, "set", mk, 0, want)
		return err
	}
	for range 3 {
		res, err := d.raw.store(ctx, addr, "add", mk, 0, want)
		if err != nil || res == stored {
			return err
		}
		got, ok, err := d.raw.fetch(ctx, addr, mk)
		if err != nil {
			return err
		}
		if !ok {
			continue // evicted or flushed in between: record ours
		}
		if bytes.Equal(got, want) {
			return nil
		}
		return fmt.Errorf("%w: memcached server %s serves locks for the server list %q, this Locker uses %q: "+
			"a key may map to another server under a different list, so two owners could hold one lock; "+
			"use the same servers in the same order everywhere, or pin=reset once every holder under the old list is gone",
			backend.ErrInvalidOption, addr, strings.TrimPrefix(string(got), pinMagic), d.servers)
	}
	return fmt.Errorf("%w: the server-list record on %s keeps disappearing", backend.ErrUnavailable, addr)
}

// lock is one hold of a lock.
type lock struct {
	d      *driver
	key    string // memcached key
	owner  string
	tenure string
	hold   string
	ttl    atomic.Int64 // the longest TTL asked for: bounds the background undo
}

// Token is 0: memcached has no fencing counter that survives eviction and
// restart (CAS values restart at 1).
func (l *lock) Token() uint64 { return 0 }

func (l *lock) Release(ctx context.Context) error {
	d := l.d
	_, err := run(d, ctx, func(ctx context.Context) (struct{}, error) {
		err := d.removeHold(ctx, l.key, l.owner, l.tenure, l.hold)
		if ioError(err) && ctx.Err() == nil {
			d.flushIdle()
			// A "not held" now may be the first attempt's success: keep
			// the first error, the outcome is unknown.
			if err2 := d.removeHold(ctx, l.key, l.owner, l.tenure, l.hold); !errors.Is(err2, backend.ErrNotHeld) {
				err = err2
			}
		}
		if err != nil && !errors.Is(err, backend.ErrNotHeld) {
			d.undo(l.key, l.owner, l.tenure, l.hold, time.Duration(l.ttl.Load()))
		}
		return struct{}{}, classify(err)
	}, nil)
	return err
}

func (l *lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if _, err := validity(ttl); err != nil {
		return err
	}
	_, err := run(l.d, ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.refresh(ctx, ttl)
	}, nil)
	return err
}

// refresh is Refresh's work within run: extendHold, once more on fresh
// connections after an I/O error (most likely a pooled connection to a
// restarted server), and the longer TTL recorded on success. RefreshBatch
// falls back to it for the items its pipeline cannot settle.
func (l *lock) refresh(ctx context.Context, ttl time.Duration) error {
	d := l.d
	err := d.extendHold(l.key, l.owner, l.tenure, l.hold, ttl)
	if ioError(err) && ctx.Err() == nil {
		d.flushIdle()
		err = d.extendHold(l.key, l.owner, l.tenure, l.hold, ttl)
	}
	if err == nil {
		l.extended(ttl)
	}
	return classify(err)
}

// extended records a successful refresh with ttl: the lock's ttl, which
// bounds a background undo of its release, becomes the longest asked for.
func (l *lock) extended(ttl time.Duration) {
	for {
		cur := l.ttl.Load()
		if int64(ttl) <= cur || l.ttl.CompareAndSwap(cur, int64(ttl)) {
			return
		}
	}
}
