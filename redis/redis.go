// Package redis is distlock's backend for one Redis: a single server, a
// Sentinel-managed master, or a Redis Cluster, through any go-redis
// UniversalClient. It registers the URL schemes "redis" and "rediss" (TLS).
//
// # Mechanism
//
// A lock is a Redis hash holding the owner, the fencing token and one field
// per hold, with a PX expiry. Every operation is one Lua script in one round
// trip (EVALSHA, falling back to EVAL on NOSCRIPT):
//
//   - Acquire: SET NX PX semantics — if the key is absent, INCR the key's
//     fencing counter and create the hash with the TTL; if the same owner
//     holds it, add a hold (reentrancy) and extend the expiry to
//     max(remaining, ttl); otherwise change nothing and report the holder's
//     remaining PTTL.
//   - Release: owner-checked compare-and-delete. Only the holder (owner,
//     token and the acquisition's own hold id must match) can remove its
//     hold; when the last hold goes the key is deleted and a wake-up is
//     PUBLISHed on the key's channel. A stale holder — one whose lock
//     expired and was taken over, as in the classic scenario — changes
//     nothing and gets ErrNotHeld.
//   - Refresh: owner-checked compare-and-PEXPIRE that never shortens the
//     expiry. Refreshes due together are sent in one pipeline
//     (backend.BatchRefresher).
//
// All keys of one lock carry the same hash tag, derived from the SHA-256 of
// the key, so they sit in one Cluster slot; any key of 1 to 1024 bytes with
// any content maps to fixed-length names (see internal/redisscript for the
// layout). The fencing counter key (<prefix>{tag}:fence) has no expiry and
// is left behind on purpose: it is what keeps tokens increasing.
//
// Waiting: a waiter is woken by the release's pub/sub message. Every
// Locker shares ONE pub/sub connection among all its waiters, subscribing
// and unsubscribing per-key channels as waiters come and go; a waiter is
// subscribed (the server has confirmed the SUBSCRIBE) before its retry, so a
// release in between is not missed, and each wait is capped at the holder's
// remaining TTL, so a holder that expires without a release (a crash) is
// noticed without a message. If the subscription cannot be made the waiter
// polls with its retry policy instead. In a Redis Cluster the messages are
// ordinary PUBLISH messages, which the cluster forwards to every node.
//
// # Fair queue (WithFair, fair=true)
//
// With WithFair, waiters queue in Redis itself: a sorted set per key orders
// them by arrival across every Locker, process and host that uses WithFair,
// and a free lock goes only to the first live waiter. The release that
// frees the lock writes it for that waiter (its owner, a new fencing token
// and the TTL it asked for) and publishes the grant on the key's channel:
// the waiter holds the lock on receiving the message, without another round
// trip, which makes a handoff one message instead of a message and an
// acquire. A waiter renews its queue entry with an attempt at least every
// second; an entry not renewed for 3s (its waiter crashed or is paused) is
// skipped, and a waiter whose ctx ends leaves the queue at once, releasing
// the lock if it was granted meanwhile. A waiter that misses its grant
// message (a reconnection) finds the grant with its next attempt. The
// granted lease's validity counts from the waiter's last attempt plus the
// time the server says passed until the grant (less 1%, and never later
// than the message's arrival), not from the arrival itself, so a waiter
// paused in between does not overestimate it; the elapsed part comes from
// the server's clock, which a clock step distorts as it distorts every
// Redis expiry. A departing waiter's leave is never dropped under load
// (one background release per waiter), and a waiter that cannot subscribe
// polls at least every third of its TTL, so a grant is not left unused.
// The price, measured side by side: an uncontended TryAcquire+Release about
// 10% slower (the scripts also look at the queue) and two more Redis keys per
// contended lock (<lock>:q and <lock>:w, expiring 6s after the last waiter).
// Lockers without WithFair on the same key do not queue: they can take a
// free lock ahead of the queue, though never one granted to a waiter. A
// waiter that crashes within 3s of its last attempt can still be granted
// the lock, which then stays unused until its TTL, as a crashed holder's
// would. Reentrancy overrides the queue: waiters that share an owner
// (WithOwner) nest as soon as that owner holds the lock — granted, or
// taken by one of them — each handed a hold of its own by the same script
// and its own grant message, wherever it stands in the queue and in
// whichever Locker it waits (TestFairSameOwnerQueued).
//
// # Capabilities
//
// Fencing, Reentrant, Notify and Expiring — and Fair with WithFair:
//
//   - Not Durable. Without persistence a restarted Redis has forgotten
//     every lock: another owner can take a lock its holder still believes
//     it has (until that holder's next refresh fails). With the default AOF
//     policy (appendfsync everysec) up to a second of acquisitions can be
//     lost in a crash; only "appendonly yes" with "appendfsync always"
//     writes each acquisition to disk before replying, and even then the
//     lost-lock window depends on the OS and disk honouring fsync.
//   - Failover loses locks. Redis replication is asynchronous: a master can
//     acknowledge an acquisition and fail before the replica has it; the
//     promoted replica then grants the same lock to another owner. The
//     Sentinel and Cluster clients fail over automatically, so this applies
//     to them. Use Redlock over independent masters, or a consensus-backed
//     store (ZooKeeper), where that matters.
//   - Fencing tokens are strictly increasing only while the counter
//     survives: a Redis restarted without persistence (or failed over to a
//     replica that lacks the last INCRs) starts the counter again and
//     tokens can repeat. If fencing must hold across restarts, run Redis
//     with "appendonly yes" and "appendfsync always".
//   - Not SessionBound: Redis has no client sessions that own keys; a dead
//     holder's lock is freed by its TTL.
//   - Not Fair without WithFair: a release wakes one waiter per Locker —
//     the one of that Locker that has waited longest — not every waiter; a
//     woken waiter that then leaves (with the lock or without it) hands the
//     wake-up on to the next, so no release is lost. The first retry to
//     reach Redis wins: waiters of different Lockers (processes, hosts)
//     race, and one woken late can lose to a newcomer's first attempt.
//   - Eviction: a maxmemory policy other than noeviction (or volatile-* on
//     a busy instance) can evict a live lock key. Run lock keys on an
//     instance with maxmemory-policy noeviction.
//
// TTLs must be whole milliseconds of at least 3ms (PX is in milliseconds;
// anything finer is refused with ErrInvalidTTL rather than rounded). The
// validity distlock counts from each request's send time is the TTL less
// 1% and 2ms of clock-drift allowance (backend.DefaultValidity).
//
// # URLs
//
//	redis://[user:password@]host:port[/db][?param=value&...]
//	rediss://...   (TLS; skip_verify=true disables certificate checks)
//
// The standard parts and go-redis's own query parameters (dial_timeout,
// read_timeout, write_timeout, pool_size, pool_timeout, max_retries,
// client_name, protocol, ...) are parsed by go-redis's ParseURL. distlock
// adds prefix= (WithPrefix), subscribe_timeout= (WithSubscribeTimeout) and
// subscription_linger= (WithSubscriptionLinger), as Go durations, and
// fair=true (WithFair). Any other
// parameter, a malformed URL or several hosts is an ErrInvalidOption. One
// URL names one server: for Redis Cluster or Sentinel build the go-redis
// client and call New.
//
// Opening a URL does not connect (like database/sql.Open): an unreachable
// server shows up as ErrUnavailable from Acquire and TryAcquire, within
// their context. The Locker owns the client it created and closes it in
// Close.
//
// # Errors
//
// A server that cannot be reached, a pool timeout, an I/O error or an error
// reply such as LOADING, READONLY or OOM yields an error wrapping
// ErrUnavailable, with the go-redis error reachable through errors.As and
// errors.Is. An acquisition whose outcome is unknown (the request may have
// reached Redis but no reply came) is undone in the background: its unique
// hold is removed, owner-checked, within min(TTL, 5s). Because the request
// may still be on its way (a slow network, a paused server), one release
// that finds nothing does not end the undo: it tries again several times
// over that bound, so an acquire landing after the first try is removed
// too (TestDelayedRequestUndone).
package redis

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/redisscript"
)

// Option configures New.
type Option func(*config)

type config struct {
	defaults       []distlock.Option
	prefix         string
	confirmTimeout time.Duration
	linger         time.Duration
	closeClient    bool
	fair           bool
}

// WithDefaults sets options applied to every acquisition of the Locker
// (passed to distlock.New), such as distlock.WithTTL.
func WithDefaults(opts ...distlock.Option) Option {
	return func(c *config) { c.defaults = append(c.defaults, opts...) }
}

// WithPrefix sets the prefix of every Redis key and channel the Locker uses
// (default "distlock:"). Lockers must use the same prefix to contend for the
// same locks.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithSubscribeTimeout bounds how long a waiter waits for the server to
// confirm its pub/sub subscription before it falls back to polling (default
// 2s).
func WithSubscribeTimeout(d time.Duration) Option {
	return func(c *config) { c.confirmTimeout = d }
}

// WithSubscriptionLinger keeps the Locker's shared pub/sub connection open
// for d after its last waiter left, so bursts of contention do not dial a
// new connection each time (default 1s). 0 or less closes it as soon as the
// last waiter leaves.
func WithSubscriptionLinger(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			d = -1
		}
		c.linger = d
	}
}

// WithFair makes waiters queue in Redis, in arrival order across every
// Locker, process and host that uses WithFair for the key, and hands a
// released lock directly to the first waiter: the release writes the lock
// for that waiter and publishes the grant, so the waiter holds it without
// another round trip (see "Fair queue" in the package documentation). The
// Locker then reports the Fair capability. Lockers without WithFair on the
// same key still respect the queue's grants but do not queue themselves.
func WithFair() Option {
	return func(c *config) { c.fair = true }
}

// WithCloseClient makes the Locker's Close also close the client. By
// default New does not take ownership of the caller's client.
func WithCloseClient() Option {
	return func(c *config) { c.closeClient = true }
}

// New returns a Locker over client, which may be a *goredis.Client, a
// Sentinel failover client or a *goredis.ClusterClient. The client stays the
// caller's (Close does not close it unless WithCloseClient is given), and
// its options apply: timeouts, pool size, retries (retried acquisitions are
// safe: each carries a unique hold id, so a retry is idempotent).
//
// Every call returns when its ctx ends, even in the middle of a round trip
// (go-redis itself does not interrupt a socket read on cancellation): the
// abandoned round trip finishes in the background, bounded by the client's
// ReadTimeout, and an acquisition it completes is undone. Enable the
// client's ContextTimeoutEnabled so that ctx deadlines also bound the
// socket I/O (the URL opener does).
func New(client goredis.UniversalClient, opts ...Option) distlock.Locker {
	c := config{prefix: redisscript.DefaultPrefix}
	for _, o := range opts {
		o(&c)
	}
	return distlock.New(newDriver(client, c).backend(), "redis", c.defaults...)
}

func newDriver(client goredis.UniversalClient, c config) *driver {
	d := &driver{
		client: client,
		prefix: c.prefix,
		owned:  c.closeClient,
		holds:  redisscript.NewHoldSource(),
		sub: redisscript.NewSubscriber(client, redisscript.SubscriberOptions{
			ConfirmTimeout: c.confirmTimeout,
			Linger:         c.linger,
		}),
		bg: redisscript.NewBackground(0),
	}
	d.fair = c.fair
	return d
}

// backend returns d as the Locker sees it: d itself, or its fair-queue
// form, which waits on its own (backend.Blocker).
func (d *driver) backend() backend.Driver {
	if d.fair {
		return &fairDriver{d}
	}
	return d
}

// driver implements backend.Driver, Notifier, TTLPolicy and BatchRefresher.
type driver struct {
	client goredis.UniversalClient
	prefix string
	owned  bool
	holds  *redisscript.HoldSource
	sub    *redisscript.Subscriber
	fair   bool // keys carry the fair queue (see fairDriver)

	closed atomic.Bool

	// Background goroutines: calls that outlive a caller whose ctx ended,
	// and undo work. Close waits for them.
	bg *redisscript.Background
}

var (
	_ backend.Driver         = (*driver)(nil)
	_ backend.Notifier       = (*driver)(nil)
	_ backend.TTLPolicy      = (*driver)(nil)
	_ backend.BatchRefresher = (*driver)(nil)
)

var errNotHeld = fmt.Errorf("%w: expired, released, or held by another owner", backend.ErrNotHeld)

func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, Notify: true, Expiring: true}
}

// Validity implements backend.TTLPolicy: whole milliseconds only, then the
// default drift allowance.
func (d *driver) Validity(ttl time.Duration) (time.Duration, error) {
	if _, err := redisscript.PX(ttl); err != nil {
		return 0, err
	}
	return backend.DefaultValidity(ttl)
}

func (d *driver) keys(key string) redisscript.Keys {
	k := redisscript.KeysFor(d.prefix, key)
	if d.fair {
		k = k.Fair()
	}
	return k
}

func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	k := d.keys(req.Key)
	hold := d.holds.Next()
	sent := time.Now()
	r, err := d.attempt(ctx, k, req, func(ctx context.Context) (redisscript.AcquireResult, error) {
		if d.fair {
			return redisscript.FairAcquire(ctx, d.client, k, req.Owner, req.TTL, redisscript.FairAttempt{Hold: hold, N: 1})
		}
		return redisscript.Acquire(ctx, d.client, k, req.Owner, hold, req.TTL)
	}, hold)
	if err != nil {
		return nil, err
	}
	if r.Outcome == redisscript.Busy {
		return nil, backend.Busy(r.PTTL)
	}
	return &lock{d: d, keys: k, owner: req.Owner, hold: hold, token: r.Token, issued: sent}, nil
}

// attempt runs one acquire script for hold so that the caller returns when
// ctx ends, and undoes, owner-checked and in the background, whatever an
// attempt whose outcome is unknown may have done for hold.
func (d *driver) attempt(ctx context.Context, k redisscript.Keys, req backend.Request, run func(context.Context) (redisscript.AcquireResult, error), hold string) (redisscript.AcquireResult, error) {
	if d.closed.Load() {
		return redisscript.AcquireResult{}, backend.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return redisscript.AcquireResult{}, err
	}
	var (
		r         redisscript.AcquireResult
		err       error
		abandoned bool
	)
	if ctx.Done() == nil {
		r, err = run(ctx)
	} else {
		abandoned, err = d.bg.Run(ctx, func(ctx context.Context) error {
			var err error
			r, err = run(ctx)
			return err
		}, func(err error) {
			// The caller gave up: whatever the script did, undo this hold.
			if err == nil || redisscript.Ambiguous(err) {
				d.undo(k, req, hold, err != nil, true)
			}
		})
	}
	if err != nil {
		if redisscript.Ambiguous(err) && !abandoned {
			// The script may have run: undo exactly this hold.
			d.undo(k, req, hold, true, false)
		}
		// r is not read: an abandoned run may still be writing it.
		return redisscript.AcquireResult{}, redisscript.Classify(ctx, err)
	}
	return r, nil
}

// undo removes, in the background, what an attempt of hold may have done:
// its hold of the lock, and for a fair lock its place in the queue (which is
// never left to chance, see Background.Leave). inFlight: the attempt's
// request may still reach the server — a release can then arrive first and
// find nothing, so the undo repeats on UndoAcquire's schedule; otherwise
// the attempt's outcome is known and one owner-checked release, retried
// until it gets an answer, removes the hold.
func (d *driver) undo(k redisscript.Keys, req backend.Request, hold string, inFlight, fromBackground bool) {
	switch {
	case k.Queue != "":
		d.bg.Leave(d.client, k, req.Owner, hold, inFlight, fromBackground)
	case inFlight:
		d.bg.UndoAcquire(d.client, k, req.Owner, 0, hold, req.TTL, fromBackground)
	default:
		d.bg.Undo(d.client, k, req.Owner, 0, hold, req.TTL, fromBackground)
	}
}

// Watch implements backend.Notifier over the Locker's shared subscription;
// it returns when the subscription is confirmed, or when ctx ends.
func (d *driver) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	return d.sub.Watch(ctx, d.keys(key).Channel)
}

// RefreshBatch implements backend.BatchRefresher: one pipeline (one round
// trip per node) for every lock of this driver in items.
func (d *driver) RefreshBatch(ctx context.Context, items []backend.RefreshItem) []error {
	errs := make([]error, len(items))
	ops := make([]redisscript.RefreshOp, 0, len(items))
	idx := make([]int, 0, len(items))
	for i, it := range items {
		l, ok := it.Lock.(*lock)
		if !ok || l.d != d {
			errs[i] = it.Lock.Refresh(ctx, it.TTL)
			continue
		}
		ops = append(ops, redisscript.RefreshOp{Keys: l.keys, Owner: l.owner, Token: l.token, Hold: l.hold, TTL: it.TTL})
		idx = append(idx, i)
	}
	if len(ops) == 0 {
		return errs
	}
	var res []redisscript.RefreshResult
	if ctx.Done() == nil {
		res = redisscript.RefreshBatch(ctx, d.client, ops)
	} else if _, err := d.bg.Run(ctx, func(ctx context.Context) error {
		res = redisscript.RefreshBatch(ctx, d.client, ops)
		return nil
	}, nil); err != nil {
		for _, i := range idx {
			errs[i] = err
		}
		return errs
	}
	for j, r := range res {
		switch {
		case r.Err != nil:
			errs[idx[j]] = redisscript.Classify(ctx, r.Err)
		case !r.Held:
			errs[idx[j]] = errNotHeld
		}
	}
	return errs
}

// Close stops the shared subscription, waits for background work (calls
// whose caller's ctx ended, undo of ambiguous operations; each bounded by
// the client's timeouts and at most 5s) and closes the client if the driver
// owns it.
func (d *driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	_ = d.sub.Close()
	d.bg.Close()
	if d.owned {
		if err := d.client.Close(); err != nil && !errors.Is(err, goredis.ErrClosed) {
			return err
		}
	}
	return nil
}

// lock is one hold granted by the driver.
type lock struct {
	d      *driver
	keys   redisscript.Keys
	owner  string
	hold   string
	token  uint64
	issued time.Time // no later than the server started the TTL
}

func (l *lock) Token() uint64 { return l.token }

// IssuedAt implements backend.Issued.
func (l *lock) IssuedAt() time.Time { return l.issued }

func (l *lock) Release(ctx context.Context) error {
	var (
		r         redisscript.ReleaseResult
		err       error
		abandoned bool
	)
	if ctx.Done() == nil {
		r, err = redisscript.Release(ctx, l.d.client, l.keys, l.owner, l.token, l.hold)
	} else {
		abandoned, err = l.d.bg.Run(ctx, func(ctx context.Context) error {
			var err error
			r, err = redisscript.Release(ctx, l.d.client, l.keys, l.owner, l.token, l.hold)
			return err
		}, func(err error) {
			if redisscript.Ambiguous(err) {
				l.d.bg.Undo(l.d.client, l.keys, l.owner, l.token, l.hold, redisscript.UndoTimeout, true)
			}
		})
	}
	if err != nil {
		if redisscript.Ambiguous(err) && !abandoned {
			// It may not have run: finish it in the background so the
			// lock does not stay held until its TTL.
			l.d.bg.Undo(l.d.client, l.keys, l.owner, l.token, l.hold, redisscript.UndoTimeout, false)
		}
		return redisscript.Classify(ctx, err)
	}
	if r == redisscript.NotHeld {
		return errNotHeld
	}
	return nil
}

func (l *lock) Refresh(ctx context.Context, ttl time.Duration) error {
	var (
		held bool
		err  error
	)
	if ctx.Done() == nil {
		held, err = redisscript.Refresh(ctx, l.d.client, l.keys, l.owner, l.token, l.hold, ttl)
	} else {
		_, err = l.d.bg.Run(ctx, func(ctx context.Context) error {
			var err error
			held, err = redisscript.Refresh(ctx, l.d.client, l.keys, l.owner, l.token, l.hold, ttl)
			return err
		}, nil)
	}
	if err != nil {
		return redisscript.Classify(ctx, err)
	}
	if !held {
		return errNotHeld
	}
	return nil
}
