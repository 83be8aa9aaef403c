package memory

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

func init() { backend.RegisterInProcess("mem", open) }

// Namespace is one table of locks, the in-process stand-in for a server.
// Its zero value is not usable: call NewNamespace or Shared.
type Namespace struct {
	mu     sync.Mutex
	locks  map[string]*entry
	fences map[string]uint64 // last token per key; outlives the lock
	semt   semTable          // semaphores (semaphore.go)
}

type entry struct {
	owner    string
	metadata string
	holds    int
	// lingerUntil keeps the lock taken by owner after its holds are gone,
	// until then (ReleaseAfter: a minimum hold).
	lingerUntil time.Time
	token       uint64
	expires     time.Time
	sess        *driver
	lost        map[*lock]func(error) // Request.Lost of the holder's live holds
	waiters     []*waiter             // FIFO
}

type waiter struct {
	req     backend.Request
	sess    *driver
	ch      chan *lock // receives the grant; capacity 1
	granted *lock
}

// NewNamespace returns a private, empty namespace.
func NewNamespace() *Namespace {
	return &Namespace{locks: map[string]*entry{}, fences: map[string]uint64{}}
}

var (
	sharedMu sync.Mutex
	shared   = map[string]*Namespace{}
)

// Shared returns the process-wide namespace called name, which "mem://name"
// opens ("" for "mem://").
func Shared(name string) *Namespace {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	ns, ok := shared[name]
	if !ok {
		ns = NewNamespace()
		shared[name] = ns
	}
	return ns
}

// Option configures New.
type Option func(*config)

type config struct{ defaults []distlock.Option }

// WithDefaults sets options applied to every acquisition of the Locker,
// such as distlock.WithTTL.
func WithDefaults(opts ...distlock.Option) Option {
	return func(c *config) { c.defaults = append(c.defaults, opts...) }
}

// New returns a Locker, one new session, on ns. Its only error is a nil ns
// (ErrInvalidOption): the signature is every backend's, func New(client,
// ...Option) (*Locker, error).
func New(ns *Namespace, opts ...Option) (*distlock.Locker, error) {
	if ns == nil {
		return nil, fmt.Errorf("%w: memory.New: nil Namespace (use NewNamespace or Shared)", backend.ErrInvalidOption)
	}
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if err := distlock.CheckOptions(c.defaults...); err != nil {
		return nil, fmt.Errorf("memory: WithDefaults: %w", err)
	}
	d := &driver{ns: ns}
	l := distlock.New(d, "mem", c.defaults...)
	d.locker = l
	return l, nil
}

// MustNew is New for a Namespace known to be non-nil, as in tests and
// examples; it panics on New's error.
func MustNew(ns *Namespace, opts ...Option) *distlock.Locker {
	l, err := New(ns, opts...)
	if err != nil {
		panic(err)
	}
	return l
}

// Session is a Locker's session on its Namespace; a *Session target of
// (*distlock.Locker).As gets it.
type Session struct{ d *driver }

// Crash ends the session as a client crash would: every lock it holds is
// freed for other owners at once, without Release, and its leases are told
// they were lost. Waiting acquisitions fail. The Locker is unusable after.
func (s Session) Crash() {
	s.d.endSession(true)
	_ = s.d.locker.Close()
}

// Crash is Session.Crash of l's session; it panics if l is not a memory
// Locker. For tests.
func Crash(l *distlock.Locker) {
	var s Session
	if !l.As(&s) {
		panic("memory.Crash: not a memory Locker")
	}
	s.Crash()
}

// As answers (*distlock.Locker).As: *Session gets the Locker's session,
// **Namespace its namespace.
func (d *driver) As(target any) bool {
	switch t := target.(type) {
	case **driver: // for this package's tests
		*t = d
	case *Session:
		*t = Session{d}
	case **Namespace:
		*t = d.ns
	default:
		return false
	}
	return true
}

// Expire drops the lock named key at once, as if its TTL had run out, and
// reports whether it was held. The holder is not told: its lease still looks
// valid until its next refresh, as when a paused process or a clock jump
// makes a real server expire a lock early. For tests of code that must
// survive that.
func (ns *Namespace) Expire(key string) bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	e := ns.locks[key]
	now := time.Now()
	if e == nil || (e.holds == 0 && !now.Before(e.lingerUntil)) {
		return false
	}
	e.holds, e.lingerUntil = 0, time.Time{}
	ns.settle(key, e, now)
	return true
}

func open(_ context.Context, u *url.URL) (backend.Driver, error) {
	if u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.User != nil {
		return nil, fmt.Errorf("%w: mem URL must be mem:// or mem://name, got %q", backend.ErrInvalidOption, u.Redacted())
	}
	if err := backend.NewParams(u).Done(); err != nil {
		return nil, err
	}
	return &driver{ns: Shared(u.Host)}, nil
}

// driver is one session on a namespace.
type driver struct {
	ns     *Namespace
	locker *distlock.Locker // the Locker over d, for Session.Crash
	closed bool             // guarded by ns.mu
}

func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, Notify: true, Fair: true, SessionBound: true, Expiring: true}
}

// Close ends the session; locks still held are freed.
func (d *driver) Close() error {
	d.endSession(false)
	return nil
}

func (d *driver) endSession(crash bool) {
	ns := d.ns
	ns.mu.Lock()
	d.closed = true
	var lost []func(error)
	now := time.Now()
	for key, e := range ns.locks {
		if e.sess == d && e.holds > 0 {
			told := ns.drop(key, e, now)
			if crash {
				lost = append(lost, told...)
			}
		}
		// Waiters of this session are woken by their own context
		// (Locker.Close cancels them) or, after Crash, fail at their
		// next expiry check.
	}
	if told := ns.endPermits(d); crash {
		lost = append(lost, told...)
	}
	ns.mu.Unlock()
	for _, f := range lost {
		f(fmt.Errorf("%w: session ended", backend.ErrLockLost))
	}
}

// drop ends every hold of e and its minimum hold, hands it on (settle),
// and returns the Lost callbacks of the holds it ended, for the caller to
// call once ns.mu is released. Callers hold ns.mu.
func (ns *Namespace) drop(key string, e *entry, now time.Time) []func(error) {
	lost := make([]func(error), 0, len(e.lost))
	for _, f := range e.lost {
		lost = append(lost, f)
	}
	e.holds, e.lingerUntil = 0, time.Time{}
	ns.settle(key, e, now)
	return lost
}

// settle expires e if its time is up and, when it is free, hands it to the
// first waiter or deletes it. Callers hold ns.mu.
func (ns *Namespace) settle(key string, e *entry, now time.Time) {
	if e.holds > 0 && !now.Before(e.expires) {
		e.holds = 0
	}
	if e.holds > 0 {
		return
	}
	if now.Before(e.lingerUntil) {
		e.expires = e.lingerUntil
		return // taken until the owner's minimum hold ends
	}
	clear(e.lost)
	for len(e.waiters) > 0 {
		w := e.waiters[0]
		e.waiters = e.waiters[1:]
		if w.sess.closed {
			continue
		}
		w.granted = ns.grant(key, e, w.req, w.sess, now)
		w.ch <- w.granted
		ns.nestQueued(e, now)
		return
	}
	delete(ns.locks, key)
}

// nestQueued hands a nested hold at once to every waiter of e whose owner
// now holds e: an acquisition of the holder's owner succeeds at once, also
// when it was queued before its owner got the lock. The other waiters keep
// their places. Callers hold ns.mu.
func (ns *Namespace) nestQueued(e *entry, now time.Time) {
	e.waiters = slices.DeleteFunc(e.waiters, func(w *waiter) bool {
		if w.sess.closed || w.req.Owner != e.owner {
			return false
		}
		w.granted = e.nest(w.req, w.sess, now)
		w.ch <- w.granted
		return true
	})
}

// nest adds a hold of req's owner, who holds e, with e's token; the expiry
// is never shortened. Callers hold ns.mu.
func (e *entry) nest(req backend.Request, sess *driver, now time.Time) *lock {
	e.holds++
	if exp := now.Add(req.TTL); exp.After(e.expires) {
		e.expires = exp
	}
	l := &lock{d: sess, key: req.Key, owner: req.Owner, token: e.token, issued: now}
	e.lost[l] = req.Lost
	return l
}

// grant makes req's owner the holder of the free entry e. Callers hold ns.mu.
func (ns *Namespace) grant(key string, e *entry, req backend.Request, sess *driver, now time.Time) *lock {
	token := ns.fences[key] + 1
	ns.fences[key] = token
	e.owner, e.metadata, e.holds, e.token, e.sess = req.Owner, req.Metadata, 1, token, sess
	e.lingerUntil = time.Time{}
	e.expires = now.Add(req.TTL)
	l := &lock{d: sess, key: key, owner: req.Owner, token: token, issued: now}
	if e.lost == nil {
		e.lost = map[*lock]func(error){}
	}
	e.lost[l] = req.Lost
	return l
}

// attempt tries to take key for req. It returns the lock, or the entry that
// blocks it. Callers hold ns.mu.
func (d *driver) attempt(req backend.Request, now time.Time) (*lock, *entry) {
	ns := d.ns
	e := ns.locks[req.Key]
	if e == nil {
		e = &entry{}
		ns.locks[req.Key] = e
		return ns.grant(req.Key, e, req, d, now), nil
	}
	ns.settle(req.Key, e, now)
	if ns.locks[req.Key] != e { // settle deleted the free entry
		e = &entry{}
		ns.locks[req.Key] = e
		return ns.grant(req.Key, e, req, d, now), nil
	}
	if e.owner == req.Owner && (e.holds > 0 || now.Before(e.lingerUntil)) {
		return e.nest(req, d, now), nil
	}
	return nil, e
}

func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if req.Permits > 0 {
		return d.tryAcquirePermit(ctx, req)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ns := d.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if d.closed {
		return nil, backend.ErrClosed
	}
	now := time.Now()
	l, e := d.attempt(req, now)
	if l != nil {
		return l, nil
	}
	return nil, backend.Busy(e.expires.Sub(now))
}

// Acquire waits in arrival order for a lock (permits: ErrSkip): the lock is handed to the first waiter
// when its holder releases it or expires, and at the same moment a nested
// hold goes to every other waiter of that waiter's owner.
func (d *driver) Acquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if req.Permits > 0 {
		return nil, backend.ErrSkip // permits wait on Watch
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", backend.ErrNotAcquired, err)
	}
	ns := d.ns
	ns.mu.Lock()
	if d.closed {
		ns.mu.Unlock()
		return nil, backend.ErrClosed
	}
	now := time.Now()
	l, e := d.attempt(req, now)
	if l != nil {
		ns.mu.Unlock()
		return l, nil
	}
	w := &waiter{req: req, sess: d, ch: make(chan *lock, 1)}
	e.waiters = append(e.waiters, w)
	expires := e.expires
	ns.mu.Unlock()

	timer := time.NewTimer(time.Until(expires))
	defer timer.Stop()
	for {
		select {
		case l := <-w.ch:
			return l, nil
		case <-ctx.Done():
			ns.mu.Lock()
			if w.granted != nil {
				// Granted as we gave up: pass the lock on.
				ns.mu.Unlock()
				_ = w.granted.Release(context.Background())
			} else {
				e.waiters = slices.DeleteFunc(e.waiters, func(x *waiter) bool { return x == w })
				ns.mu.Unlock()
			}
			return nil, fmt.Errorf("%w: %w", backend.ErrNotAcquired, ctx.Err())
		case <-timer.C:
			// The holder's time is up unless it refreshed: settle hands
			// the lock to the first waiter.
			ns.mu.Lock()
			now := time.Now()
			if ns.locks[req.Key] == e {
				ns.settle(req.Key, e, now)
			}
			if w.granted == nil && d.closed {
				e.waiters = slices.DeleteFunc(e.waiters, func(x *waiter) bool { return x == w })
				ns.mu.Unlock()
				return nil, backend.ErrClosed
			}
			next := e.expires
			ns.mu.Unlock()
			timer.Reset(max(time.Until(next), time.Millisecond))
		}
	}
}

// lock is a held lock: one hold of owner on key with token.
type lock struct {
	d      *driver
	key    string
	owner  string
	token  uint64
	issued time.Time
}

func (l *lock) Token() uint64       { return l.token }
func (l *lock) IssuedAt() time.Time { return l.issued }

// current returns the entry if l's owner still holds it with l's token.
// Callers hold ns.mu.
func (l *lock) current(now time.Time) *entry {
	ns := l.d.ns
	e := ns.locks[l.key]
	if e == nil {
		return nil
	}
	ns.settle(l.key, e, now)
	if ns.locks[l.key] != e || e.holds == 0 || e.owner != l.owner || e.token != l.token {
		return nil
	}
	return e
}

func (l *lock) Release(context.Context) error {
	ns := l.d.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	now := time.Now()
	e := l.current(now)
	if e == nil {
		return fmt.Errorf("%w: expired or held by another owner", backend.ErrNotHeld)
	}
	e.holds--
	delete(e.lost, l)
	if e.holds == 0 {
		ns.settle(l.key, e, now)
	}
	return nil
}

// ReleaseAfter gives up one hold and keeps the lock taken by its owner
// until at least d from now (backend.DelayedReleaser); when that moment
// comes the lock is settled: handed to the first waiter or freed.
func (d *driver) ReleaseAfter(_ context.Context, bl backend.Lock, dur time.Duration) error {
	l, ok := bl.(*lock)
	if !ok || l.d.ns != d.ns {
		return fmt.Errorf("%w: not a lock of this namespace", backend.ErrNotHeld)
	}
	ns := d.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	now := time.Now()
	e := l.current(now)
	if e == nil {
		return fmt.Errorf("%w: expired or held by another owner", backend.ErrNotHeld)
	}
	delete(e.lost, l)
	e.holds--
	until := now.Add(dur)
	if until.After(e.lingerUntil) {
		e.lingerUntil = until
	}
	if e.holds == 0 {
		ns.settle(l.key, e, now)
	}
	// Waiters sleep until the expiry they saw: settle for them when the
	// minimum hold ends.
	key := l.key
	time.AfterFunc(dur, func() {
		ns.mu.Lock()
		defer ns.mu.Unlock()
		if ns.locks[key] == e {
			ns.settle(key, e, time.Now())
		}
	})
	return nil
}

func (l *lock) Refresh(_ context.Context, ttl time.Duration) error {
	ns := l.d.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	now := time.Now()
	e := l.current(now)
	if e == nil {
		return fmt.Errorf("%w: expired or held by another owner", backend.ErrNotHeld)
	}
	if exp := now.Add(ttl); exp.After(e.expires) {
		e.expires = exp
	}
	return nil
}

// Inspect reads key's entry: holder, metadata, token, holds, time left and
// queued waiters.
func (d *driver) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	if err := ctx.Err(); err != nil {
		return backend.LockInfo{}, err
	}
	ns := d.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	info := backend.LockInfo{Key: key}
	e := ns.locks[key]
	if e != nil {
		now := time.Now()
		ns.settle(key, e, now)
		if ns.locks[key] == e {
			info = e.info(key, now)
		}
	}
	return info, nil
}

// ForceRelease drops every hold of key, tells the holder's leases at once
// (as a session loss would), and hands the lock to the first waiter. The
// per-key fence counter is untouched, so the next token is higher.
func (d *driver) ForceRelease(ctx context.Context, key string, want backend.Holder) (backend.LockInfo, error) {
	if err := ctx.Err(); err != nil {
		return backend.LockInfo{}, err
	}
	ns := d.ns
	ns.mu.Lock()
	e := ns.locks[key]
	now := time.Now()
	if e != nil {
		ns.settle(key, e, now)
	}
	var info backend.LockInfo
	if e != nil && ns.locks[key] == e {
		info = e.info(key, now)
	}
	if !want.Matches(info) {
		ns.mu.Unlock()
		return backend.LockInfo{}, want.Refusal()
	}
	if !info.Held {
		ns.mu.Unlock()
		return backend.LockInfo{Key: key}, nil
	}
	lost := ns.drop(key, e, now)
	ns.mu.Unlock()
	for _, f := range lost {
		f(fmt.Errorf("%w: released by force", backend.ErrLockLost))
	}
	return info, nil
}

// info describes the held entry e. Callers hold ns.mu.
func (e *entry) info(key string, now time.Time) backend.LockInfo {
	waiters := 0
	for _, w := range e.waiters {
		if !w.sess.closed {
			waiters++
		}
	}
	if e.holds == 0 && !now.Before(e.lingerUntil) {
		return backend.LockInfo{Key: key, Waiters: waiters}
	}
	return backend.LockInfo{Key: key, Held: true, Owner: e.owner, Metadata: e.metadata, Token: e.token,
		Holds: e.holds, TTL: e.expires.Sub(now), Waiters: waiters}
}
