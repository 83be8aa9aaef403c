package backend

import (
	"context"
	"fmt"
)

// MaxPermits is the largest permit count of a semaphore.
const MaxPermits = 1 << 20

// Semaphorer is implemented by drivers that can hand out permits of a
// counting semaphore: at most permits holders of one key at any instant.
// Semaphores live in a namespace of their own: a semaphore and a lock of
// the same key are independent.
//
// A permit is a Lock: Token, Refresh and Release behave as a lock's, for
// that one permit (owner-checked by the permit's own id, never touching
// another holder's permit). Request.Owner is unique to each acquisition
// (distlock refuses WithOwner for permits), so permits never nest. Lost,
// TTL and Metadata are as for a lock; a driver may ignore Metadata.
//
// The permit count is part of the semaphore's identity: while at least one
// permit of key is held, TryAcquirePermit with another count returns a
// *PermitsError (it wraps ErrInvalidOption) and takes nothing. A semaphore
// of which no permit is held takes the count of its next acquisition.
//
// Without it: Locker.Semaphore refuses the backend with
// ErrInvalidOption, giving SemaphoreRefuser's reason if the driver has one.
type Semaphorer interface {
	// TryAcquirePermit makes one attempt to take one of permits permits
	// of req.Key. With every permit held it returns ErrNotAcquired (Busy,
	// with the earliest expiry of a holder where known) and leaves nothing
	// behind; an attempt whose outcome is unknown is undone by the driver
	// as Driver.TryAcquire's is. Expired holders are dropped in the same
	// atomic step that counts the holders.
	TryAcquirePermit(ctx context.Context, req Request, permits int) (Lock, error)
	// PermitCapabilities reports what the driver guarantees of permits:
	// Fencing (a per-key token strictly increasing over every permit
	// granted), Notify (PermitNotifier or PermitBlocker), SessionBound,
	// Expiring, Durable, as for locks. Reentrant is never claimed.
	PermitCapabilities() Capabilities
}

// PermitBlocker is implemented by Semaphorers whose backend can wait for a
// permit natively. AcquirePermit is TryAcquirePermit that waits until a
// permit is free or ctx ends; it honours ctx as Blocker.Acquire does and
// leaves nothing behind when it returns an error. Without it: distlock
// polls TryAcquirePermit (woken by PermitNotifier where there is one).
type PermitBlocker interface {
	AcquirePermit(ctx context.Context, req Request, permits int) (Lock, error)
}

// PermitNotifier is implemented by Semaphorers whose backend announces
// that a permit of key was given back. It has Notifier.Watch's contract,
// for permits. Without it: polling at the retry policy's delays, never
// past the earliest holder's expiry (Busy's RetryAfter).
type PermitNotifier interface {
	WatchPermits(ctx context.Context, key string) (ch <-chan struct{}, cancel func())
}

// SemaphoreRefuser is implemented by drivers without semaphores that can
// say why (a mechanism that cannot count holders atomically, a mode that
// is a per-session mutex). NoSemaphore returns that reason, an error
// wrapping ErrInvalidOption.
type SemaphoreRefuser interface {
	NoSemaphore() error
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
