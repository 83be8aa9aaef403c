package backend

import "fmt"

// MaxPermits is the largest permit count of a semaphore.
const MaxPermits = 1 << 20

// Permitter is implemented by drivers that hand out permits of counting
// semaphores. A permit is requested through the lock methods with
// Request.Permits set: Driver.TryAcquire takes one of Request.Permits
// permits of Request.Key, Blocker.Acquire waits for one (or returns
// ErrSkip), Notifier.Watch announces given-back permits (or returns a nil
// channel). At most Permits holders of one key hold a permit at any
// instant. Semaphores live in a namespace of their own: a semaphore and a
// lock of the same key are independent.
//
// A permit is a Lock: Token, Refresh and Release behave as a lock's, for
// that one permit (owner-checked by the permit's own id, never touching
// another holder's permit). With every permit held the attempt returns
// ErrNotAcquired (Busy, with the earliest expiry of a holder where known)
// and leaves nothing behind; an attempt whose outcome is unknown is undone
// by the driver as a lock's is; expired holders are dropped in the same
// atomic step that counts the holders. Request.Owner is unique to each
// acquisition (distlock refuses WithOwner for permits), so permits never
// nest. Lost, TTL and Metadata are as for a lock; a driver may ignore
// Metadata.
//
// The permit count is part of the semaphore's identity: while at least one
// permit of key is held, an attempt with another count returns a
// *PermitsError (it wraps ErrInvalidOption) and takes nothing. A semaphore
// of which no permit is held takes the count of its next acquisition.
//
// Without it: Locker.Semaphore refuses the backend with ErrInvalidOption.
type Permitter interface {
	// PermitCapabilities reports what the driver guarantees of permits:
	// Fencing (a per-key token strictly increasing over every permit
	// granted), Notify (waits woken by the backend), SessionBound,
	// Expiring, Durable, as for locks; Reentrant and Fair are never
	// claimed. A driver whose mode has no semaphores (a mechanism that
	// cannot count holders atomically, a per-session mutex) returns an
	// error wrapping ErrInvalidOption that says why; distlock then never
	// sends it a request with Permits set.
	PermitCapabilities() (Capabilities, error)
}

// PermitsError is the error of an acquisition whose permit count differs
// from the count of the semaphore's holders: one key is one semaphore, and
// two counts on it would silently admit more holders than either caller
// expects. It wraps ErrInvalidOption.
type PermitsError struct {
	Key  string
	Have int // the count the semaphore's current holders acquired with
	Want int // the count of the refused acquisition
}

func (e *PermitsError) Error() string {
	return fmt.Sprintf("%v: the semaphore is held with %d permits, not %d (one key is one semaphore: use one count everywhere, or another key)",
		ErrInvalidOption, e.Have, e.Want)
}

// Unwrap returns ErrInvalidOption.
func (e *PermitsError) Unwrap() error { return ErrInvalidOption }

// CheckPermits returns an error wrapping ErrInvalidOption unless permits is
// between 1 and MaxPermits.
func CheckPermits(permits int) error {
	if permits < 1 || permits > MaxPermits {
		return fmt.Errorf("%w: %d permits: want 1 to %d", ErrInvalidOption, permits, MaxPermits)
	}
	return nil
}
