package distlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/distlock/distlock/backend"
)

// Semaphore is a counting semaphore of a fixed number of permits on one
// key, shared by every client of the backend: at no instant do more than
// Permits() holders hold a valid permit of the key.
//
// A permit is a *Lease, made by the same machinery as a lock's: it expires
// after its TTL unless refreshed, is refreshed automatically by default,
// keeps a local validity deadline measured from the moment its request was
// sent, and reports its end on Done, Context and Err no later than the
// moment the backend can hand the permit to another holder. Release and
// Refresh are checked against the permit's own id: a holder whose permit
// expired never gives back or extends another holder's permit. A holder
// that crashes gives its permit back after its TTL (or, on session-bound
// backends, with its session). Where Capabilities().Fencing, Token is
// strictly increasing per key over every permit granted.
//
// The permit count is part of the semaphore's identity. While a permit of
// the key is held, an acquisition with another count fails with an error
// wrapping ErrInvalidOption whose *backend.PermitsError (errors.As) carries
// both counts; nothing is taken. Once no permit is held the key's next
// acquisition sets the count anew.
//
// Semaphores and locks live in separate namespaces: a semaphore on key
// "jobs" and a lock on key "jobs" do not exclude each other. Every
// acquisition is a distinct holder: WithOwner is refused (ErrInvalidOption).
// Backends whose driver implements backend.Permitter hand them out; the
// others refuse with ErrInvalidOption and the reason.
type Semaphore struct {
	l       *Locker // the permits' own Locker: see permitLocker
	key     string
	permits int
}

// Semaphore returns the semaphore of permits permits on key, over l's
// backend. Nothing is contacted. Errors wrap ErrInvalidKey (key),
// ErrInvalidOption (permits outside 1 to backend.MaxPermits, a backend
// without semaphores) or ErrClosed.
func (b *Locker) Semaphore(key string, permits int) (*Semaphore, error) {
	if err := ValidateKey(key); err != nil {
		return nil, b.err("semaphore", key, err)
	}
	if err := backend.CheckPermits(permits); err != nil {
		return nil, b.err("semaphore", key, err)
	}
	pl, err := b.permitLocker(permits)
	if err != nil {
		return nil, b.err("semaphore", key, err)
	}
	return &Semaphore{l: pl, key: key, permits: permits}, nil
}

// Key returns the semaphore's name.
func (s *Semaphore) Key() string { return s.key }

// Permits returns the number of permits.
func (s *Semaphore) Permits() int { return s.permits }

// Capabilities reports what the backend guarantees of permits: Fencing,
// Notify, SessionBound, Expiring, Durable as for locks; never Reentrant.
func (s *Semaphore) Capabilities() Capabilities { return s.l.caps }

// Acquire blocks until it holds one permit, ctx ends, or the backend fails,
// as Locker.Acquire does for a lock: when ctx ends first the error
// satisfies errors.Is(err, ErrNotAcquired) and errors.Is(err, ctx.Err()),
// and no permit is left behind. opts are as for a lock (WithTTL,
// WithAutoRefresh, WithRetry, WithObserver, ...), except WithOwner.
func (s *Semaphore) Acquire(ctx context.Context, opts ...Option) (*Lease, error) {
	return s.acquire(ctx, "acquire", opts, true)
}

// TryAcquire makes one attempt and returns ErrNotAcquired at once if every
// permit is held.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...Option) (*Lease, error) {
	return s.acquire(ctx, "try-acquire", opts, false)
}

func (s *Semaphore) acquire(ctx context.Context, op string, opts []Option, wait bool) (*Lease, error) {
	st := defaultSettings()
	for _, o := range s.l.defaults {
		o(&st)
	}
	for _, o := range opts {
		if o == nil {
			return nil, s.l.err(op, s.key, fmt.Errorf("%w: nil Option", ErrInvalidOption))
		}
		o(&st)
	}
	if st.owner != "" {
		return nil, s.l.err(op, s.key, fmt.Errorf("%w: WithOwner: every permit is a distinct holder, permits do not nest", ErrInvalidOption))
	}
	return s.l.acquire(ctx, op, s.key, opts, wait)
}

// permitLocker returns the Locker that hands out l's permits of semaphores
// of the given count: a Locker of its own over a driver that takes permits
// instead of locks, so that permits become Leases through the one
// acquisition, refresh and loss machinery of locks, on a scheduler that
// never mixes them with l's locks (whose batch refreshes the driver would
// not recognise). It is made once per count and closed when l closes; l's
// Close waits for it.
func (l *Locker) permitLocker(permits int) (*Locker, error) {
	pm, ok := l.drv.(backend.Permitter)
	if !ok {
		return nil, fmt.Errorf("%w: the %s backend has no semaphores (its driver does not implement backend.Permitter)", ErrInvalidOption, l.name)
	}
	caps, err := pm.PermitCapabilities()
	if err != nil {
		if !errors.Is(err, ErrInvalidOption) {
			err = fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		return nil, err
	}
	caps.Reentrant, caps.Fair = false, false
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if pl := l.permits[permits]; pl != nil {
		return pl, nil
	}
	l.inflight.Add(1) // done by pl's Close, which l's Close waits for
	pl := New(&permitDriver{Driver: l.drv, caps: caps, permits: permits}, l.name, l.defaults...)
	pl.ttlPolicy, pl.classifier = l.ttlPolicy, l.classifier
	pl.batcher, pl.delayed, pl.heldNotifier = nil, nil, nil
	if l.blocker != nil {
		pl.blocker = permitBlocker{l.blocker, permits}
	}
	if l.notifier != nil {
		pl.notifier = permitNotifier{l.notifier, permits}
	}
	if l.permits == nil {
		l.permits = map[int]*Locker{}
	}
	l.permits[permits] = pl
	context.AfterFunc(l.closeCtx, func() {
		_ = pl.Close()
		l.inflight.Done()
	})
	return pl, nil
}

// permitDriver is l's driver seen as a Driver of the permits of one count:
// every request it passes on has Permits set.
type permitDriver struct {
	backend.Driver
	caps    backend.Capabilities
	permits int
}

func (d *permitDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	req.Permits = d.permits
	return d.Driver.TryAcquire(ctx, req)
}

// Capabilities are the driver's PermitCapabilities.
func (d *permitDriver) Capabilities() backend.Capabilities { return d.caps }

// Close does nothing: the connections are the Locker's.
func (d *permitDriver) Close() error { return nil }

// Inspect is not offered for permits: a Semaphore has no Inspect.
func (d *permitDriver) Inspect(context.Context, string) (backend.LockInfo, error) {
	return backend.LockInfo{}, errors.ErrUnsupported
}

// ForceRelease is not offered for permits: a Semaphore has no ForceRelease.
func (d *permitDriver) ForceRelease(context.Context, string, backend.Holder) (backend.LockInfo, error) {
	return backend.LockInfo{}, errors.ErrUnsupported
}

type permitBlocker struct {
	b       backend.Blocker
	permits int
}

func (b permitBlocker) Acquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	req.Permits = b.permits
	return b.b.Acquire(ctx, req)
}

type permitNotifier struct {
	n       backend.Notifier
	permits int
}

func (n permitNotifier) Watch(ctx context.Context, req backend.Request) (<-chan struct{}, func()) {
	req.Permits = n.permits
	return n.n.Watch(ctx, req)
}
