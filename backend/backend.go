package backend

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The sentinel errors of distlock. Package distlock re-exports each of them
// under the same name; drivers return them (wrapped with %w) so that callers
// can test with errors.Is.
var (
	// ErrNotAcquired: the lock is held by another owner (TryAcquire), or
	// Acquire gave up because its context ended.
	ErrNotAcquired = errors.New("lock not acquired")
	// ErrNotHeld: the caller does not hold the lock (any more): it was
	// released, it expired, or another owner holds it now.
	ErrNotHeld = errors.New("lock not held")
	// ErrLockLost: the lease ended without Release — it expired, its
	// session died, or its refresh failed. It wraps ErrNotHeld.
	ErrLockLost = fmt.Errorf("lock lost: %w", ErrNotHeld)
	// ErrInvalidKey: the key is empty, longer than MaxKeyLen bytes, or not
	// valid UTF-8.
	ErrInvalidKey = errors.New("invalid lock key")
	// ErrInvalidTTL: the TTL is not positive, or below what the backend can
	// honour (no silent rounding).
	ErrInvalidTTL = errors.New("invalid lock TTL")
	// ErrInvalidOption: an option value is unusable (for example an owner
	// id that is not valid UTF-8, or a malformed backend URL).
	ErrInvalidOption = errors.New("invalid option")
	// ErrUnavailable: the backend cannot be reached or cannot decide (server
	// down, pool exhausted, no quorum).
	ErrUnavailable = errors.New("backend unavailable")
	// ErrClosed: the Locker was closed.
	ErrClosed = errors.New("locker closed")
)

// MaxKeyLen is the longest key, in bytes, that every backend accepts.
const MaxKeyLen = 1024

// Capabilities says what a backend guarantees. A backend claims only what it
// guarantees; the conformance suite tests every claim.
type Capabilities struct {
	// Fencing: Token() is strictly increasing per key across every new
	// acquisition (owners, processes, expiries, takeovers).
	Fencing bool
	// Reentrant: acquisitions with the same WithOwner id on the same key
	// nest, and the lock is free only when each of them is released.
	Reentrant bool
	// Notify: waiters are woken by the backend, not by polling.
	Notify bool
	// Fair: waiters acquire in arrival order.
	Fair bool
	// SessionBound: the backend frees the lock when the holder's
	// session or connection dies.
	SessionBound bool
	// Expiring: the lock expires after its TTL unless refreshed.
	Expiring bool
	// Durable: a held lock survives a backend restart.
	Durable bool
}

// Request is one acquisition as the driver sees it. distlock has validated
// Key and TTL before the driver is called.
type Request struct {
	// Key names the lock: valid UTF-8, 1 to MaxKeyLen bytes, any content.
	// The driver maps it to a safe server-side name without collisions.
	Key string
	// Owner identifies the holder. Two requests with the same Owner on the
	// same Key are the same holder: the second nests (reentrancy) and
	// returns the holder's token. Owners are random per acquisition unless
	// the caller chose one with WithOwner.
	Owner string
	// TTL is the lease duration for Expiring backends: the server must
	// free the lock TTL after the request unless it is refreshed. A nested
	// acquisition never shortens the current expiry.
	TTL time.Duration
	// Metadata is the holder's description (WithMetadata): valid UTF-8 of
	// at most MaxMetadataLen bytes, "" when none. Drivers that implement
	// Inspector store it with the lock when they grant it; a nested
	// acquisition keeps the first hold's metadata.
	Metadata string
	// Lost is called at most once, from any goroutine, when the driver
	// learns that this lock is gone without Release (session expired,
	// connection killed). It never blocks. Drivers that cannot learn of
	// loss on their own may ignore it: distlock's local validity deadline
	// and refresh failures cover them.
	Lost func(error)
	// Permits, when above 0, makes the request one for a permit of the
	// counting semaphore of Permits permits on Key (see Permitter), not
	// for the lock Key. distlock sets it only for drivers whose
	// PermitCapabilities returns no error, and never to more than
	// MaxPermits.
	Permits int
}

// Driver is the interface a backend implements. Its methods are safe for
// concurrent use.
type Driver interface {
	// TryAcquire makes one attempt. It returns ErrNotAcquired (wrapped,
	// for instance by Busy) when another owner holds the lock, and leaves
	// nothing behind in the backend in that case.
	//
	// It returns when ctx ends, even in the middle of a round trip. An
	// attempt whose outcome is then unknown (ctx ended, or the connection
	// failed, after the request may have reached the server — its bytes
	// may still be on the way) must not leave an orphan lock: the driver
	// undoes it itself, owner-checked, in the background, on a schedule
	// that outlasts a delayed request (an undo that finds nothing tries
	// again), and bounded in time, by an id of its own that it records with
	// every acquisition (a hold id, a request id, a protected-create GUID):
	// only the driver can tell its own record from a nested hold of the
	// same owner, and only a per-hold id survives the same owner's retry.
	TryAcquire(ctx context.Context, req Request) (Lock, error)
	// Capabilities reports what the backend guarantees.
	Capabilities() Capabilities
	// Close releases the driver's resources. Locks still held are left to
	// expire or to the end of the session.
	Close() error
	// Inspector and ForceReleaser are every backend's operator calls; a
	// driver that truly cannot do one returns an error wrapping
	// errors.ErrUnsupported.
	Inspector
	ForceReleaser
}

// Lock is one held lock as granted by a driver.
type Lock interface {
	// Token is the fencing token of this acquisition: strictly
	// increasing per key where the driver claims Fencing, else 0.
	Token() uint64
	// Refresh extends the lock to at least ttl from now if this owner
	// still holds it; it never shortens the expiry. It returns ErrNotHeld
	// (wrapped) if the lock is gone or held by another owner.
	Refresh(ctx context.Context, ttl time.Duration) error
	// Release gives up one hold of the lock if this owner still holds it,
	// and frees it when no hold remains. It returns ErrNotHeld (wrapped)
	// if the lock is gone or held by another owner, and then changes
	// nothing in the backend.
	Release(ctx context.Context) error
}

// DelayedReleaser is implemented by drivers of Expiring backends that can
// give up a hold and leave the lock taken a while longer (a minimum hold,
// distlock.WithMinHold). ReleaseAfter gives up one hold of lock as Release
// does, owner-checked, and keeps the lock taken by its owner until at
// least d from now: no other owner can take it until then, the owner can
// (as a nested hold), and when its last hold is released the lock stays
// taken until the latest such moment, then frees. ErrNotHeld as for
// Release. Without it: distlock refreshes the lock to at least d (a refresh
// never shortens) and leaves the hold, so the lock may stay up to one TTL
// longer, and refuses WithMinHold together with WithOwner (a later lease
// of the same owner would nest into the hold left behind).
type DelayedReleaser interface {
	ReleaseAfter(ctx context.Context, lock Lock, d time.Duration) error
}

// ErrSkip is returned by Blocker.Acquire, before it sends anything, for a
// request that the driver does not wait for natively (say, a permit where
// only locks queue natively), with a nil Lock: distlock then waits for
// that request as for a driver without Blocker. It is returned bare, never
// wrapped: a wrapped ErrSkip fails the acquisition with that error, and a
// Lock returned along with ErrSkip is released by distlock.
var ErrSkip = errors.New("distlock/backend: no native wait for this request")

// Blocker is implemented by drivers whose backend can wait for a lock, or
// a permit (Request.Permits), natively (a server-side wait, a watch on a
// predecessor node, an in-process queue). distlock's Acquire then calls
// Acquire instead of its own retry loop. Acquire must honour ctx and, when
// it returns an error, leave nothing behind in the backend. For a request
// it has no native wait for, it returns ErrSkip at once.
type Blocker interface {
	Acquire(ctx context.Context, req Request) (Lock, error)
}

// Notifier is implemented by drivers whose backend announces releases.
// Watch registers interest in req.Key's lock, or with req.Permits above 0
// in its semaphore's permits; it reads only those two fields. After Watch
// returns, every release wakes at least one of the driver's watchers of
// that lock or semaphore with a non-blocking send on its channel
// (capacity at least 1). A driver may wake just one of several watchers,
// to spare the others a wasted attempt, provided that a woken watcher's
// cancel hands the wake-up on to another watcher: a waiter that leaves
// must not swallow a release. distlock calls Watch after a failed attempt
// and before the next one, so a release between the two is not missed; it
// calls cancel when it stops waiting, whether it acquired or not.
//
// For a request whose releases the driver does not announce (say, permits
// where only locks are announced), Watch returns a nil channel and a nil
// cancel at once: distlock then polls for it as for a driver without
// Notifier (a non-nil cancel returned with a nil channel is called at
// once).
//
// Watch honours ctx, the caller's: every wait inside it (a dial, a
// subscription and its confirmation by the server) ends when ctx ends, and
// Watch returns at once then, so a silent notification channel never holds
// Acquire past its context. Work that must outlive the call (a write
// already under way, an unsubscription) goes on in the background, bounded
// by the driver, and never delays the caller. When interest cannot be
// registered — ctx ended, the notification channel is down or silent —
// Watch returns a non-nil channel that may never fire and a cancel that
// the caller still calls; it reports no error, because the caller's
// remedy is the same either way: it checks ctx itself and otherwise falls
// back on its retry delays.
type Notifier interface {
	Watch(ctx context.Context, req Request) (ch <-chan struct{}, cancel func())
}

// HeldNotifier is optionally implemented by a Notifier that wakes one
// watcher of a lock at a time. WatchHeld is Watch whose cancel is told
// whether the waiter leaves holding the lock: a woken watcher that
// acquired need not hand its wake-up on, since the lock is taken and its
// release will wake the next watcher (a hand-on would cost the next
// watcher an attempt that cannot succeed). cancel(false) is Watch's
// cancel. distlock calls WatchHeld instead of Watch for the waits of
// lock requests (never of permits, nor for observers) where it is
// implemented.
type HeldNotifier interface {
	WatchHeld(ctx context.Context, req Request) (ch <-chan struct{}, cancel func(held bool))
}

// TTLPolicy is implemented by drivers whose validity differs from the
// default. Validity returns for how long after an acquire or refresh request
// with ttl was sent the lock is certainly still held by the server (ttl less
// clock drift and the server's expiry granularity), or an error wrapping
// ErrInvalidTTL if the backend cannot honour ttl exactly.
type TTLPolicy interface {
	Validity(ttl time.Duration) (time.Duration, error)
}

// Issued is implemented by locks granted after a wait inside the driver
// (Blocker): IssuedAt is the time (with its monotonic reading) at which the
// server started the lock's TTL, or a time before it. Locks without it count
// their validity from the moment the request was sent.
type Issued interface {
	IssuedAt() time.Time
}

// Deadliner is implemented by locks of session-bound backends that keep a
// local deadline of their own (last contact with the server plus the session
// timeout, less a margin): ValidUntil returns it, or the zero time when
// there is none. distlock consults it whenever the lease's state is read, so
// a holder resumed from a pause sees its loss at once, even before the
// driver's own timer or keepalive has run; the driver still calls
// Request.Lost when it notices.
type Deadliner interface {
	ValidUntil() time.Time
}

// RefreshItem is one lock to refresh in a batch.
type RefreshItem struct {
	Lock Lock
	TTL  time.Duration
}

// BatchRefresher is implemented by drivers that can refresh many locks in
// one round trip (pipelining). RefreshBatch returns one error per item, in
// order; each behaves as Lock.Refresh would.
type BatchRefresher interface {
	RefreshBatch(ctx context.Context, items []RefreshItem) []error
}

// DefaultValidity is the validity of drivers without a TTLPolicy: ttl less a
// clock-drift allowance of 1% plus 2 ms, as in the Redlock algorithm. It
// returns ErrInvalidTTL when nothing remains.
func DefaultValidity(ttl time.Duration) (time.Duration, error) {
	v := ttl - ttl/100 - 2*time.Millisecond
	if v <= 0 {
		return 0, fmt.Errorf("%w: %v leaves no validity after clock-drift allowance (minimum 3ms)", ErrInvalidTTL, ttl)
	}
	return v, nil
}

// BusyError is returned by TryAcquire when another owner holds the lock. It
// wraps ErrNotAcquired. RetryAfter, when positive, is how long the current
// holder's lock has left: a waiter need not wait longer than that before the
// next attempt.
type BusyError struct {
	RetryAfter time.Duration
}

func (e *BusyError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("%v: held by another owner for up to %v", ErrNotAcquired, e.RetryAfter)
	}
	return fmt.Sprintf("%v: held by another owner", ErrNotAcquired)
}

// Unwrap returns ErrNotAcquired.
func (e *BusyError) Unwrap() error { return ErrNotAcquired }

// Busy returns a *BusyError with the holder's remaining time.
func Busy(retryAfter time.Duration) error { return &BusyError{RetryAfter: retryAfter} }
