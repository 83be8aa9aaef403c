package redis

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/redissub"
)

// New returns a Locker over client, which may be a *goredis.Client, a
// Sentinel failover client or a *goredis.ClusterClient. The client stays the
// caller's (Close does not close it unless WithCloseClient is given), and
// its options apply: timeouts, pool size, retries (retried acquisitions are
// safe: each carries a unique hold id, so a retry is idempotent). New
// checks every option's value and the client: a nil client or a refused
// value (WithSubscribeTimeout not positive) is an error wrapping
// distlock.ErrInvalidOption, and nothing is started then. New does not
// connect.
//
// Every call returns when its ctx ends, even in the middle of a round trip
// (go-redis itself does not interrupt a socket read on cancellation): the
// abandoned round trip finishes in the background, bounded by the client's
// ReadTimeout, and an acquisition it completes is undone. Enable the
// client's ContextTimeoutEnabled so that ctx deadlines also bound the
// socket I/O (the URL opener does).
func New(client goredis.UniversalClient, opts ...Option) (*distlock.Locker, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	d, err := newDriver(client, c)
	if err != nil {
		return nil, err
	}
	return distlock.New(d.backend(), "redis", c.defaults...), nil
}

// newDriver is the one path from a checked config to a driver, for New and
// for the URL opener.
func newDriver(client goredis.UniversalClient, c config) (*driver, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redis: New(nil client)", backend.ErrInvalidOption)
	}
	if len(c.errs) > 0 {
		return nil, c.errs[0]
	}
	if err := checkWait(client, c.wait); err != nil {
		return nil, err
	}
	bg := redislua.NewUndoer(0)
	_, cluster := client.(*goredis.ClusterClient)
	return &driver{
		cluster: cluster,
		client:  client,
		batch:   redislua.NewBatch(client, bg.Group()),
		prefix:  c.prefix,
		owned:   c.closeClient,
		fair:    c.fair,
		wait:    c.wait,
		holds:   redislua.NewHoldSource(),
		known:   &keyCache{seed: maphash.MakeSeed()},
		sub: redissub.NewSubscriber(client, redissub.SubscriberOptions{
			ConfirmTimeout: c.confirmTimeout,
			Linger:         c.linger,
		}),
		bg: bg,
	}, nil
}

// backend returns d as the Locker sees it: d itself, or its fair-queue
// form, which waits on its own (backend.Blocker).
func (d *driver) backend() backend.Driver {
	if d.fair {
		return &fairDriver{d}
	}
	return d
}

// driver implements backend.Driver, Notifier, TTLPolicy, BatchRefresher
// and ErrorClassifier (errors.go).
type driver struct {
	client goredis.UniversalClient
	prefix string
	owned  bool
	holds  *redislua.HoldSource
	known  *keyCache // keys of names recently acquired (see keys)
	sub    *redissub.Subscriber
	fair   bool // keys carry the fair queue (see fairDriver)
	wait   waitPolicy
	// cluster: the client is a Cluster client, whose scripts may be
	// refused with TRYAGAIN while a slot migrates (retryTryAgain).
	cluster bool

	closed atomic.Bool

	// Background goroutines: calls that outlive a caller whose ctx ended
	// (async.Call on bg.Group()), the batch's flushes, and undo work.
	// Close waits for them.
	bg *redislua.Undoer
	// batch sends acquire, release and refresh: requests made while one
	// is in flight go out together, as one pipeline.
	batch *redislua.Batch
}

var (
	_ backend.Driver          = (*driver)(nil)
	_ backend.Notifier        = (*driver)(nil)
	_ backend.HeldNotifier    = (*driver)(nil)
	_ backend.TTLPolicy       = (*driver)(nil)
	_ backend.BatchRefresher  = (*driver)(nil)
	_ backend.ErrorClassifier = (*driver)(nil)
)

var errNotHeld = fmt.Errorf("%w: expired, released, or held by another owner", backend.ErrNotHeld)

func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, Notify: true, Expiring: true}
}

// Validity implements backend.TTLPolicy: whole milliseconds only, then the
// default drift allowance.
func (d *driver) Validity(ttl time.Duration) (time.Duration, error) {
	if _, err := redislua.PX(ttl); err != nil {
		return 0, err
	}
	return backend.DefaultValidity(ttl)
}

// keys returns the keys of the lock named key, as the driver's
// acquisitions remembered them (d.known) or derived anew.
func (d *driver) keys(key string) redislua.Keys {
	k, _ := d.knownKeys(key)
	return k
}

// knownKeys is keys, reporting whether d.known had them.
func (d *driver) knownKeys(key string) (redislua.Keys, bool) {
	if k, ok := d.known.get(key); ok {
		return k, true
	}
	k := redislua.KeysFor(d.prefix, key)
	if d.fair {
		k = k.Fair()
	}
	return k, false
}

func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if req.Permits > 0 {
		return d.tryAcquirePermit(ctx, req)
	}
	k, known := d.knownKeys(req.Key)
	hold := d.holds.Next()
	sent := time.Now()
	var fa *redislua.FairAttempt
	if d.fair {
		fa = &redislua.FairAttempt{Hold: hold, N: 1, Metadata: req.Metadata}
	}
	r, err := d.attempt(ctx, k, req, hold, fa)
	if err != nil {
		return nil, err
	}
	if r.Outcome == redislua.Busy {
		return nil, backend.Busy(r.PTTL)
	}
	l := &lock{d: d, keys: k, owner: req.Owner, hold: hold, token: r.Token, issued: sent}
	if !known {
		d.known.put(&l.keys)
	}
	if err := d.confirmGrant(ctx, l, req); err != nil {
		return nil, err
	}
	return l, nil
}

// attempt runs one acquire script for hold (fa nil: the plain one, else
// the fair queue's attempt fa), through the driver's Batch, so that the
// caller returns when ctx ends, and undoes, owner-checked and in the
// background, whatever an attempt whose outcome is unknown may have done
// for hold. An attempt still queued when ctx ends is never sent.
func (d *driver) attempt(ctx context.Context, k redislua.Keys, req backend.Request, hold string, fa *redislua.FairAttempt) (redislua.AcquireResult, error) {
	if d.closed.Load() {
		return redislua.AcquireResult{}, backend.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return redislua.AcquireResult{}, async.CtxError(ctx) // nothing sent, nothing to undo
	}
	var late func(redislua.AcquireResult, error)
	if ctx.Done() != nil { // a ctx that never ends is never abandoned: no late callback to build
		late = func(_ redislua.AcquireResult, err error) {
			// The caller gave up: whatever the script did, undo this hold.
			if err == nil || redislua.Ambiguous(err) {
				d.undo(k, req, hold, err != nil, true)
			}
		}
	}
	r, abandoned, err := retryTryAgain(ctx, d.cluster, func() (redislua.AcquireResult, bool, error) {
		if fa != nil {
			return d.batch.FairAcquire(ctx, k, req.Owner, req.TTL, *fa, late)
		}
		acquire := d.batch.Acquire
		if d.sub.Watching(k.Channel) {
			// Waiters of this Locker: a lock taken now is marked for
			// them (see WatchHeld).
			acquire = d.batch.AcquireWaited
		}
		return acquire(ctx, k, req.Owner, hold, req.Metadata, req.TTL, late)
	})
	if err != nil {
		if redislua.Ambiguous(err) && !abandoned {
			// The script may have run: undo exactly this hold.
			d.undo(k, req, hold, true, false)
		}
		return redislua.AcquireResult{}, redislua.OpError(ctx, err)
	}
	return r, nil
}

// undo removes, in the background, what an attempt of hold may have done:
// its hold of the lock, and for a fair lock its place in the queue (which is
// never left to chance, see Undoer.Leave). inFlight: the attempt's request
// may still reach the server — a release can then arrive first and find
// nothing, so the undo repeats on UndoAcquire's schedule; otherwise the
// attempt's outcome is known and one owner-checked release, retried until
// it gets an answer, removes the hold.
func (d *driver) undo(k redislua.Keys, req backend.Request, hold string, inFlight, child bool) {
	switch {
	case k.Queue != "":
		d.bg.Leave(d.client, k, req.Owner, hold, inFlight, child)
	case inFlight:
		d.bg.UndoAcquire(d.client, k, req.Owner, 0, hold, req.TTL, child)
	default:
		d.bg.Undo(d.client, k, req.Owner, 0, hold, req.TTL, child)
	}
}

// Watch implements backend.Notifier over the Locker's shared subscription;
// it returns when the subscription is confirmed and the watcher registered
// with the lock's holder (redislua.Watch: a release publishes only for a
// lock someone waits for), or when ctx ends. A holder that takes the lock
// later is registered by the caller's next attempt (or Observe's next
// look, an Inspect). A failed registration is not reported: the caller
// then learns of the release by its own timers, as of a lost message.
// Every release message wakes every Watch caller (redissub.WatchAll): it is
// taken for an observer (Election.Observe), which never stands in the
// queue of the waiters (WatchHeld), so that one that does not read its
// channel holds no waiter's wake-up. For permits (req.Permits) it watches
// the semaphore's channel, whose release messages wake one watcher each.
func (d *driver) Watch(ctx context.Context, req backend.Request) (<-chan struct{}, func()) {
	if req.Permits > 0 {
		return d.watchPermits(ctx, req)
	}
	k := d.keys(req.Key)
	ch, cancel := d.sub.WatchAll(ctx, k.Channel)
	if ctx.Err() == nil && !d.closed.Load() {
		_, _, _ = async.Call(d.bg.Group(), ctx, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, redislua.Watch(ctx, d.client, k)
		}, nil)
	}
	return ch, cancel
}

// WatchHeld implements backend.HeldNotifier for distlock's acquire loop:
// unlike Watch it does not mark the lock, since the loop attempts again
// right after it and a busy attempt marks the holder; and a woken waiter
// that leaves holding the lock hands no wake-up on, since the lock it
// takes while other waiters of this Locker wait is marked for them at once
// (AcquireWaited), and its release wakes the next.
func (d *driver) WatchHeld(ctx context.Context, req backend.Request) (<-chan struct{}, func(held bool)) {
	return d.sub.WatchHeld(ctx, d.keys(req.Key).Channel)
}

// RefreshBatch implements backend.BatchRefresher: one pipeline (one round
// trip per node) for every lock of this driver in items.
func (d *driver) RefreshBatch(ctx context.Context, items []backend.RefreshItem) []error {
	errs := make([]error, len(items))
	if d.wait.n > 0 {
		// Each refresh is confirmed on its lock's node (WithWaitReplicas).
		for i, it := range items {
			errs[i] = it.Lock.Refresh(ctx, it.TTL)
		}
		return errs
	}
	ops := make([]redislua.RefreshOp, 0, len(items))
	idx := make([]int, 0, len(items))
	for i, it := range items {
		l, ok := it.Lock.(*lock)
		if !ok || l.d != d {
			errs[i] = it.Lock.Refresh(ctx, it.TTL)
			continue
		}
		ops = append(ops, redislua.RefreshOp{Keys: l.keys, Owner: l.owner, Token: l.token, Hold: l.hold, TTL: it.TTL})
		idx = append(idx, i)
	}
	if len(ops) == 0 {
		return errs
	}
	var (
		res []redislua.RefreshResult
		err error
	)
	if ctx.Done() == nil {
		res = redislua.RefreshBatch(ctx, d.client, ops)
	} else {
		res, _, err = async.Call(d.bg.Group(), ctx, func(ctx context.Context) ([]redislua.RefreshResult, error) {
			return redislua.RefreshBatch(ctx, d.client, ops), nil
		}, nil)
	}
	if err != nil {
		for _, i := range idx {
			errs[i] = err
		}
		return errs
	}
	for j, r := range res {
		switch {
		case r.Err != nil:
			errs[idx[j]] = redislua.OpError(ctx, r.Err)
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
