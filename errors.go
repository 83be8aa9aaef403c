package distlock

import (
	"fmt"
	"unicode/utf8"

	"github.com/distlock/distlock/backend"
)

// Sentinel errors, compared with errors.Is. Every error distlock returns
// wraps at most these, the context's error and the backend's own error, which
// stays reachable with errors.As.
var (
	// ErrNotAcquired: TryAcquire found the lock held by another owner, or
	// Acquire's context ended first (then the error also satisfies
	// errors.Is(err, ctx.Err())).
	ErrNotAcquired = backend.ErrNotAcquired
	// ErrNotHeld: Release or Refresh of a lease that was already released
	// or lost. The backend was not changed: another owner's lock is never
	// touched.
	ErrNotHeld = backend.ErrNotHeld
	// ErrLockLost: the lease ended without Release (expired, session lost,
	// refresh failed, taken over). errors.Is(ErrLockLost, ErrNotHeld) holds.
	ErrLockLost = backend.ErrLockLost
	// ErrInvalidKey: the key is empty, longer than 1024 bytes, or not
	// valid UTF-8. Returned before any backend call.
	ErrInvalidKey = backend.ErrInvalidKey
	// ErrInvalidTTL: the TTL is zero, negative, or below what the backend
	// can honour. Returned before any backend call; never rounded.
	ErrInvalidTTL = backend.ErrInvalidTTL
	// ErrInvalidOption: an unusable option or backend URL.
	ErrInvalidOption = backend.ErrInvalidOption
	// ErrUnavailable: the backend is unreachable or cannot decide (server
	// down, pool timeout, no quorum). Refused credentials are ErrAuth, a
	// backend not set up for distlock ErrMisconfigured, never this.
	ErrUnavailable = backend.ErrUnavailable
	// ErrAuth: the backend refused the credentials or a permission the
	// operation needs (wrong or missing password, unknown user, an ACL or
	// grant that forbids the command). It never wraps ErrUnavailable, and
	// WithRetryUnavailable does not wait it out: retrying cannot help; fix
	// the URL's user and password or the server's ACL.
	ErrAuth = backend.ErrAuth
	// ErrMisconfigured: the backend accepted the connection but is not set
	// up for the Locker: a missing database, schema or lock table. It
	// never wraps ErrUnavailable and is not retried: fix the URL or create
	// what is missing (the error says what).
	ErrMisconfigured = backend.ErrMisconfigured
	// ErrClosed: the Locker was closed.
	ErrClosed = backend.ErrClosed
)

// Error describes a failed lock operation, as os.PathError describes a
// failed file operation. Err is the cause: it wraps one of the sentinel
// errors and, where there is one, the backend client's own error.
type Error struct {
	Op      string // "acquire", "try-acquire", "release", "refresh", "open", "close"
	Key     string // the lock key, "" for Locker-wide operations
	Backend string // the backend's name, such as "redis"
	Err     error
}

func (e *Error) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s: %s: %v", e.Backend, e.Op, e.Err)
	}
	return fmt.Sprintf("%s: %s %q: %v", e.Backend, e.Op, shortKey(e.Key), e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// shortKey keeps error messages readable for 1 KiB keys.
func shortKey(k string) string {
	if len(k) <= 64 {
		return k
	}
	n := 48
	for n > 0 && !utf8.RuneStart(k[n]) {
		n--
	}
	return fmt.Sprintf("%s…(%d bytes)", k[:n], len(k))
}
