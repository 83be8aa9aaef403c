package distlock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/distlock/distlock/backend"
)

// Capabilities says what a backend guarantees; see backend.Capabilities.
type Capabilities = backend.Capabilities

// New wraps a backend driver into a Locker. name labels errors ("redis").
// opts become the defaults of every acquisition. Backend packages call New
// from their typed constructors; users rarely need it.
func New(d backend.Driver, name string, opts ...Option) *Locker {
	l := &Locker{
		drv:      d,
		name:     name,
		caps:     d.Capabilities(),
		defaults: opts,
		leases:   map[*Lease]struct{}{},
	}
	l.baseOK = !hasNil(opts) // a nil one panics at each acquisition, as it did
	if l.baseOK {
		l.base = applied(defaultSettings(), opts)
	}
	l.blocker, _ = d.(backend.Blocker)
	l.notifier, _ = d.(backend.Notifier)
	l.heldNotifier, _ = d.(backend.HeldNotifier)
	l.ttlPolicy, _ = d.(backend.TTLPolicy)
	l.batcher, _ = d.(backend.BatchRefresher)
	l.delayed, _ = d.(backend.DelayedReleaser)
	l.classifier, _ = d.(backend.ErrorClassifier)
	l.closeCtx, l.closeFn = context.WithCancelCause(context.Background())
	l.sched.l = l
	return l
}

// Open opens a Locker from a URL such as "redis://127.0.0.1:6379/0" or
// "mem://". The scheme selects a backend registered with backend.Register;
// an unknown scheme's error lists the registered ones. opts become the
// defaults of every acquisition.
//
// Open never panics, whatever the string. Its errors are one line, and show
// the URL with its password replaced by "xxxxx" (even when the URL does not
// parse, as when a password holds an unescaped '#'); a numeric URL parameter
// out of its range is an ErrInvalidOption.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Locker, error) {
	l, err := open(ctx, rawURL, opts...)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Err = backend.ScrubError(rawURL, e.Err)
		}
		return nil, err
	}
	return l, nil
}

func open(ctx context.Context, rawURL string, opts ...Option) (*Locker, error) {
	u, err := backend.ParseURL(rawURL)
	if err != nil {
		return nil, &Error{Op: "open", Backend: "distlock", Err: fmt.Errorf("%w: malformed URL %q: %s", ErrInvalidOption, redact(rawURL), urlReason(err))}
	}
	if u.Scheme == "" {
		return nil, &Error{Op: "open", Backend: "distlock", Err: fmt.Errorf("%w: URL %q has no scheme (want e.g. redis://host:6379 or mem://)", ErrInvalidOption, redact(rawURL))}
	}
	open, err := backend.Lookup(u.Scheme)
	if err != nil {
		return nil, &Error{Op: "open", Backend: "distlock", Err: err}
	}
	d, err := open(ctx, u)
	if err != nil {
		return nil, &Error{Op: "open", Backend: u.Scheme, Err: err}
	}
	return New(d, u.Scheme, opts...), nil
}

// redact is raw with its password masked.
func redact(raw string) string { return backend.RedactURL(raw) }

// urlReason is url.Parse's complaint without the URL it quotes whole.
func urlReason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// Do acquires key, runs fn with the lease's context (cancelled if the lock is
// lost), and releases the lock. It returns fn's error, joined with ErrLockLost
// if the lock was lost while fn ran (fn's work may then have overlapped with
// another owner's), or the acquire error. If fn panics, the lock is
// released before the panic goes on.
func (l *Locker) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	if fn == nil {
		return nilFn("do", key)
	}
	lease, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	return runLeased(ctx, lease, fn)
}

// TryDo runs fn under the lock named key only if the lock is free now
// (one attempt, as TryAcquire), and reports whether fn ran: the "skip if
// another host runs it" of scheduled jobs. When another owner holds the
// lock it returns false and a nil error. Otherwise it is Do: fn runs with
// the lease's context and the lock is released after it, and the error is
// fn's, joined with ErrLockLost if the lock was lost while fn ran, or the
// acquisition's (ctx ended, backend unavailable: false and the error).
// Give WithMinHold so that a host whose timer fires a little later still
// finds the lock taken after a short job.
func (l *Locker) TryDo(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) (ran bool, err error) {
	if fn == nil {
		return false, nilFn("try-do", key)
	}
	lease, err := l.TryAcquire(ctx, key, opts...)
	if err != nil {
		if errors.Is(err, ErrNotAcquired) && !errors.Is(err, ErrUnavailable) && ctx.Err() == nil {
			return false, nil
		}
		return false, err
	}
	return true, runLeased(ctx, lease, fn)
}

// nilFn is the error of Do, TryDo and Lead given a nil function: nothing
// is taken.
func nilFn(op, key string) error {
	return &Error{Op: op, Key: key, Backend: "distlock", Err: fmt.Errorf("%w: nil function", ErrInvalidOption)}
}

// runLeased runs fn under lease and releases it: Do's and TryDo's body.
func runLeased(ctx context.Context, lease *Lease, fn func(ctx context.Context) error) error {
	returned := false
	defer func() {
		if !returned { // fn panicked: free the lock before the panic goes on, or it is refreshed for ever
			_ = lease.releaseDetached(ctx)
		}
	}()
	fnErr := fn(lease.Context())
	returned = true
	relErr := lease.releaseDetached(ctx)
	if relErr != nil && (!errors.Is(relErr, ErrNotHeld) || errors.Is(relErr, ErrLockLost)) {
		// A Release that finds the lock gone reports ErrLockLost.
		if fnErr == nil {
			return relErr // an *Error naming the key
		}
		return errors.Join(fnErr, relErr)
	}
	if lost := lease.Err(); lost != nil && errors.Is(lost, ErrLockLost) {
		if fnErr == nil {
			return lost // an *Error naming the key
		}
		return errors.Join(fnErr, lost)
	}
	return fnErr
}

// releaseTimeout bounds releases that distlock makes on its own (Do, Close,
// abandoned acquisitions).
const releaseTimeout = 5 * time.Second

// releaseBound is releaseTimeout, shortened by tests (SetReleaseTimeout).
var releaseBound atomic.Int64

func init() { releaseBound.Store(int64(releaseTimeout)) }

// releaseLimit returns the bound of distlock's own releases.
func releaseLimit() time.Duration { return time.Duration(releaseBound.Load()) }

// Locker acquires locks on one backend: the portable type, as *sql.DB is
// for databases. Open and every backend package's New return one; the
// backend's own extras are reached with As. Its methods are safe for
// concurrent use by many goroutines. A program that needs to substitute
// it (a test double) declares the one-method interface it uses, such as
// interface{ TryAcquire(context.Context, string, ...Option) (*Lease, error) }.
type Locker struct {
	drv      backend.Driver
	name     string
	caps     Capabilities
	defaults []Option
	// base is defaultSettings with defaults applied, made once by New
	// (options are pure: a copy of their result is their result); baseOK
	// false: not made (a default is nil).
	base     settings
	baseOK   bool
	blocker  backend.Blocker
	notifier backend.Notifier
	// heldNotifier, when the driver has it, is notifier's WatchHeld
	heldNotifier backend.HeldNotifier
	ttlPolicy    backend.TTLPolicy
	batcher      backend.BatchRefresher
	delayed      backend.DelayedReleaser
	classifier   backend.ErrorClassifier

	closeCtx context.Context // cancelled with ErrClosed by Close
	closeFn  context.CancelCauseFunc

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
	leases   map[*Lease]struct{}

	sched scheduler
	owned ownerWaiters // waiters to wake when their owner is granted the key

	permits map[int]*Locker // the Lockers of this Locker's semaphores, by permit count; under mu
}

// Capabilities reports what the backend guarantees.
func (l *Locker) Capabilities() Capabilities { return l.caps }

// As reaches the backend below the Locker, as Go CDK's As does: it sets
// target (a pointer) to the backend's value of that type and reports
// true, or reports false and leaves target as it was. Each backend
// package's doc lists the types it answers to (its client, and handles
// such as *zookeeper.Session or *postgres.Mode).
func (l *Locker) As(target any) bool {
	a, ok := l.drv.(backend.Aser)
	return ok && target != nil && a.As(target)
}

func (l *Locker) err(op, key string, err error) error {
	if e, ok := err.(*Error); ok && e.Key == key && e.Backend == l.name {
		err = e.Err // Lease.Err's *Error: name the key once
	}
	return &Error{Op: op, Key: key, Backend: l.name, Err: err}
}

// request is an acquisition after validation.
type request struct {
	settings
	sharedOwner bool // the owner id came from WithOwner (not a fresh random one)
	key         string
	validity    time.Duration // 0 when the backend does not expire locks
}

func (l *Locker) prepare(key string, opts []Option) (request, error) {
	r := request{settings: l.settingsWith(opts), key: key}
	if r.settings.err != nil {
		return r, r.settings.err
	}
	if err := ValidateKey(key); err != nil {
		return r, err
	}
	var err error
	if r.validity, err = l.validityFor(r.ttl); err != nil {
		return r, err
	}
	if r.validity == 0 {
		r.autoRefresh = false // nothing to refresh: the session keeps the lock
	}
	if err := l.checkMinHold(r.minHold()); err != nil {
		return r, err
	}
	r.sharedOwner = r.owner != "" && !r.freshOwner
	if r.sharedOwner && r.minHold() > 0 && l.caps.Expiring && l.delayed == nil {
		return r, fmt.Errorf("%w: WithMinHold with WithOwner needs a backend that can release with a delay (backend.DelayedReleaser): a later lease of the same owner would nest into the hold left behind; drop WithOwner", ErrInvalidOption)
	}
	if r.owner == "" {
		r.owner = newOwnerID()
	}
	return r, nil
}

// settingsWith returns the settings of an acquisition with opts:
// defaultSettings, then the Locker's default options, then opts.
func (l *Locker) settingsWith(opts []Option) settings {
	switch {
	case !l.baseOK:
		return applied(applied(defaultSettings(), l.defaults), opts)
	case len(opts) == 0:
		return l.base // no copy to the heap: an Option's argument escapes
	}
	return applied(l.base, opts)
}

func hasNil(opts []Option) bool {
	for _, o := range opts {
		if o == nil {
			return true
		}
	}
	return false
}

// applied returns s with opts applied in order.
func applied(s settings, opts []Option) settings {
	for _, o := range opts {
		o(&s)
	}
	return s
}

// validityFor returns how long a lock granted with ttl is certainly held
// after its request was sent, 0 for backends whose locks do not expire, or
// an error wrapping ErrInvalidTTL.
func (l *Locker) validityFor(ttl time.Duration) (time.Duration, error) {
	if ttl <= 0 {
		return 0, fmt.Errorf("%w: %v is not positive", ErrInvalidTTL, ttl)
	}
	if ttl > MaxTTL {
		return 0, fmt.Errorf("%w: %v is longer than MaxTTL (%v)", ErrInvalidTTL, ttl, MaxTTL)
	}
	if !l.caps.Expiring {
		return 0, nil
	}
	var (
		v   time.Duration
		err error
	)
	if l.ttlPolicy != nil {
		v, err = l.ttlPolicy.Validity(ttl)
	} else {
		v, err = backend.DefaultValidity(ttl)
	}
	if err != nil {
		return 0, err
	}
	if v <= 0 || v > ttl {
		return 0, fmt.Errorf("%w: backend reports validity %v for ttl %v", ErrInvalidTTL, v, ttl)
	}
	return v, nil
}

// ValidateKey returns an error wrapping ErrInvalidKey unless key is valid
// UTF-8 of 1 to 1024 bytes. Every backend accepts every valid key, whatever
// its content; backends escape or hash keys internally.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > backend.MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidKey, len(key), backend.MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	}
	return nil
}

// newOwnerID returns 128 random bits, unguessable, base64url-encoded.
func newOwnerID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// begin registers an in-flight call; Close waits for every one of them.
func (l *Locker) begin() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.inflight.Add(1)
	return nil
}

// closeAware returns ctx cancelled also when the Locker closes, for calls
// that wait. stop must be called when the wait is over.
func (l *Locker) closeAware(ctx context.Context) (context.Context, func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	stopAfter := context.AfterFunc(l.closeCtx, func() { cancel(ErrClosed) })
	return cctx, func() {
		stopAfter()
		cancel(nil)
	}
}

func (l *Locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// releaseQuietly gives back a lock that will not become a Lease.
func (l *Locker) releaseQuietly(lock backend.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseLimit())
	defer cancel()
	_ = lock.Release(ctx)
}

// Close ends the Locker: in-flight acquisitions return ErrClosed, leases
// still held end with ErrClosed at once and are released (best effort; on
// an Expiring backend a lease within its WithMinHold minimum hold is left
// to expire when the hold ends), its semaphores close, and the backend's
// connections are closed. Close is idempotent. It returns within the
// release bound (5 s) plus the time the driver's own Close takes, whatever
// the backend answers or fails to answer: releases, automatic refreshes
// and acquisitions still under way then are left to end on their own
// contexts.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true // no lease is tracked after this
	held := make([]*Lease, 0, len(l.leases))
	for ls := range l.leases {
		held = append(held, ls)
	}
	l.mu.Unlock()
	limit := time.Now().Add(releaseLimit())
	l.closeFn(ErrClosed) // ends waits and automatic refreshes in flight
	locks := make([]*Lease, 0, len(held))
	for _, ls := range held {
		if ls.end(closedLease, endLost) {
			locks = append(locks, ls)
		}
	}
	l.sched.stop()
	ctx, cancel := context.WithDeadline(context.Background(), limit)
	defer cancel()
	var released sync.WaitGroup
	var next atomic.Int64
	for range min(closeReleasers, len(locks)) {
		released.Add(1)
		go func() {
			defer released.Done()
			for i := int(next.Add(1)) - 1; i < len(locks); i = int(next.Add(1)) - 1 {
				_ = locks[i].giveBack(ctx)
			}
		}()
	}
	waitUntil(limit, &released, &l.inflight, &l.sched.wg)
	if err := l.drv.Close(); err != nil {
		return l.err("close", "", err)
	}
	return nil
}

// closeReleasers is how many releases Close runs at once.
const closeReleasers = 16

// waitUntil waits for every wg, but not past limit (plus a little slack for
// calls that end on a context with that deadline to return).
func waitUntil(limit time.Time, wgs ...*sync.WaitGroup) {
	done := make(chan struct{})
	go func() {
		for _, wg := range wgs {
			wg.Wait()
		}
		close(done)
	}()
	t := time.NewTimer(time.Until(limit) + closeSlack)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// closeSlack is how long after its release bound Close waits for calls
// whose context has ended to return.
const closeSlack = 50 * time.Millisecond

func (l *Locker) track(ls *Lease) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.leases[ls] = struct{}{}
	return true
}

func (l *Locker) untrack(ls *Lease) {
	l.mu.Lock()
	delete(l.leases, ls)
	l.mu.Unlock()
}
