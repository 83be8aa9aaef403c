package distlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// MultiLease is an all-or-nothing hold of several locks, one Lease per key,
// taken by AcquireAll or TryAcquireAll. It is held while every member is:
// when any member ends without Release (expired, session lost, released by
// force), Done closes, Context is cancelled and Err reports that member's
// loss, and the other members are released at once (in the background,
// bounded), so that a partial set is never left held. Its methods are safe
// for concurrent use.
type MultiLease struct {
	leases []*Lease // in acquisition order: keys sorted
	ctx    context.Context
	cancel context.CancelCauseFunc
	stops  []func() bool

	mu  sync.Mutex
	err error // why it ended; nil while held
}

// AcquireAll acquires the locks named keys on l, all or nothing: it returns
// when it holds every one of them, or holds none.
//
// Where the backend can take several locks in one request
// (backend.MultiAcquirer: redis://, for keys of one node or Cluster slot),
// AcquireAll first makes one such attempt: uncontended, the whole set costs
// one round trip. If it fails for any reason (a key held, keys of several
// slots, an observed acquisition), the path below runs.
//
// The locks are taken one by one in one global order, the keys sorted
// bytewise (duplicates taken once), each waiting as Acquire does. Two
// callers whose key sets overlap therefore never deadlock: each waits only
// for a key above every key it holds, so no cycle of waits can form. If a
// lock cannot be had before ctx ends, or the backend fails, the locks
// already taken are released at once, also within a WithMinHold (only a
// hold returned to the caller keeps a minimum hold), bounded by
// distlock's release bound, before AcquireAll returns, and the error is
// that acquisition's (with ctx ended: ErrNotAcquired and ctx.Err()). So
// are they if one of them is lost while a later one is awaited; the error
// is then that loss (ErrLockLost).
//
// opts apply to every member (WithTTL, WithAutoRefresh, WithOwner, ...).
// keys must hold at least one key; each must be
// valid (ErrInvalidKey, checked before any backend call).
func (l *Locker) AcquireAll(ctx context.Context, keys []string, opts ...Option) (*MultiLease, error) {
	return l.acquireAll(ctx, keys, opts, func(key string) (*Lease, error) { return l.Acquire(ctx, key, opts...) })
}

// TryAcquireAll is AcquireAll with one attempt per key (TryAcquire): if any
// lock is held by another owner it releases what it took and returns
// ErrNotAcquired at once, holding nothing (not even for a WithMinHold).
func (l *Locker) TryAcquireAll(ctx context.Context, keys []string, opts ...Option) (*MultiLease, error) {
	return l.acquireAll(ctx, keys, opts, func(key string) (*Lease, error) { return l.TryAcquire(ctx, key, opts...) })
}

func (l *Locker) acquireAll(ctx context.Context, keys []string, opts []Option, take func(key string) (*Lease, error)) (*MultiLease, error) {
	sorted, err := multiKeys(keys)
	if err != nil {
		return nil, err
	}
	if leases, ok := l.acquireAtOnce(ctx, sorted, opts); ok {
		return newMultiLease(leases), nil
	}
	leases := make([]*Lease, 0, len(sorted))
	for _, key := range sorted {
		ls, err := take(key)
		if err != nil {
			_ = releaseAll(boundedRelease(ctx), leases, (*Lease).abandon) // all or nothing: no minimum hold either
			return nil, err
		}
		leases = append(leases, ls)
	}
	for _, ls := range leases {
		if lost := ls.Err(); lost != nil {
			// Lost while a later key was awaited: the set was never held
			// whole, so nothing of it is kept (as Acquire returns no
			// lease lost before it returned).
			_ = releaseAll(boundedRelease(ctx), leases, (*Lease).abandon)
			return nil, lost
		}
	}
	return newMultiLease(leases), nil
}

// newMultiLease makes the MultiLease of leases, held, and ends it when any
// of them ends.
func newMultiLease(leases []*Lease) *MultiLease {
	m := &MultiLease{leases: leases}
	m.ctx, m.cancel = context.WithCancelCause(context.Background())
	for _, ls := range leases {
		m.stops = append(m.stops, context.AfterFunc(ls.Context(), func() { m.memberEnded(ls) }))
	}
	return m
}

// multiKeys checks keys and returns them sorted, without duplicates.
func multiKeys(keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, &Error{Op: "acquire-all", Backend: "distlock", Err: fmt.Errorf("%w: no keys", ErrInvalidKey)}
	}
	for _, k := range keys {
		if err := ValidateKey(k); err != nil {
			return nil, &Error{Op: "acquire-all", Key: k, Backend: "distlock", Err: err}
		}
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	return slices.Compact(sorted), nil
}

// boundedRelease returns ctx's values without its end, bounded by
// distlock's release bound: for releases distlock makes on its own.
func boundedRelease(ctx context.Context) context.Context {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseLimit())
	context.AfterFunc(rctx, cancel)
	return rctx
}

// releaseAll releases leases in reverse order, each with release
// ((*Lease).Release, or (*Lease).abandon for a rollback), and returns
// their errors joined.
func releaseAll(ctx context.Context, leases []*Lease, release func(*Lease, context.Context) error) error {
	var errs []error
	for i := len(leases) - 1; i >= 0; i-- {
		if err := release(leases[i], ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// memberEnded ends m when one of its leases ended, and releases the others
// unless m was ended by Release.
func (m *MultiLease) memberEnded(ls *Lease) {
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return
	}
	m.err = ls.Err()
	if m.err == nil { // cannot happen: its Context ended
		m.err = fmt.Errorf("%w: lease of %q ended", ErrLockLost, ls.Key())
	}
	m.mu.Unlock()
	m.cancel(m.err)
	go func() { _ = releaseAll(boundedRelease(context.Background()), m.leases, (*Lease).Release) }()
}

// Keys returns the keys held, sorted.
func (m *MultiLease) Keys() []string {
	keys := make([]string, len(m.leases))
	for i, ls := range m.leases {
		keys[i] = ls.Key()
	}
	return keys
}

// Leases returns the member leases, in Keys order: for their fencing tokens
// (Token), one per key.
func (m *MultiLease) Leases() []*Lease { return slices.Clone(m.leases) }

// Err returns nil while every member is held; then why the MultiLease
// ended: the first member's loss (it wraps ErrLockLost), or ErrNotHeld
// after Release. A member whose validity deadline has passed is seen at
// once, as Lease.Err sees it.
func (m *MultiLease) Err() error {
	for _, ls := range m.leases {
		if ls.Err() != nil {
			m.memberEnded(ls)
			break
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Done returns a channel closed when the MultiLease ends: released, or any
// member lost.
func (m *MultiLease) Done() <-chan struct{} {
	_ = m.Err()
	return m.ctx.Done()
}

// Context returns a context cancelled when the MultiLease ends, with Err as
// its cause.
func (m *MultiLease) Context() context.Context {
	_ = m.Err()
	return m.ctx
}

// Refresh refreshes every member to at least ttl from now (Lease.Refresh,
// one after another) and returns their errors joined; a member the backend
// no longer holds ends the MultiLease.
func (m *MultiLease) Refresh(ctx context.Context, ttl time.Duration) error {
	var errs []error
	for _, ls := range m.leases {
		if err := ls.Refresh(ctx, ttl); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Release releases every member, in reverse order of acquisition, each
// owner-checked as Lease.Release is, and returns their errors joined:
// ErrNotHeld (ErrLockLost) for a member that was lost; nil when every
// member was held until then. A second Release returns ErrNotHeld.
func (m *MultiLease) Release(ctx context.Context) error {
	_ = m.Err() // a member past its deadline ends m first
	m.mu.Lock()
	ended := m.err
	if ended == nil {
		m.err = errReleased
	}
	m.mu.Unlock()
	switch {
	case ended == errReleased:
		return &Error{Op: "release-all", Backend: "distlock", Err: errReleased}
	case ended != nil:
		return ended // lost before: the others were given back then
	}
	for _, stop := range m.stops {
		stop()
	}
	m.cancel(errReleased)
	return releaseAll(ctx, m.leases, (*Lease).Release)
}
