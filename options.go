package distlock

import (
	"fmt"
	"math/rand/v2"
	"time"
	"unicode/utf8"

	"github.com/distlock/distlock/backend"
)

// DefaultTTL is the lease duration when WithTTL is not given.
const DefaultTTL = 15 * time.Second

// MaxTTL is the longest TTL distlock accepts: far beyond any sensible lease
// (use auto-refresh to hold a lock for long), and far from the overflow of
// time arithmetic in every backend. Backends may accept less.
const MaxTTL = 365 * 24 * time.Hour

// Option configures one acquisition; options given to New or Open become
// defaults for every acquisition of that Locker. Options hold no state
// between calls, so one Option value can be shared by many goroutines.
type Option func(*settings)

type settings struct {
	ttl   time.Duration
	owner string
	retry RetryPolicy
	err   error
	// watching is set by WithObserver, WithLogger, WithMetadata and
	// WithMinHold only: behind a
	// pointer, so that an unobserved acquisition's settings stay as small
	// as before (they escape to the heap with every acquisition).
	watching *watching

	autoRefresh      bool
	retryUnavailable bool // WithRetryUnavailable
	freshOwner       bool // owner is a random id of this acquisition's own (termOwner), not a WithOwner id
}

func defaultSettings() settings {
	return settings{ttl: DefaultTTL, autoRefresh: true, retry: DefaultRetry}
}

// WithTTL sets the lease duration: on an Expiring backend the server frees
// the lock ttl after the last successful acquire or refresh. It must be
// positive, at most MaxTTL and at least the backend's minimum, or the
// acquisition fails with ErrInvalidTTL; it is never rounded. Session-bound backends without expiry
// ignore it once validated (their session timeout plays its role).
func WithTTL(ttl time.Duration) Option {
	return func(s *settings) { s.ttl = ttl }
}

// WithOwner sets the holder's identity for reentrancy: acquisitions of one
// key with the same owner id nest, each succeeds at once while the owner
// holds the lock, and the lock is free only when every one of them has been
// released. Without WithOwner each acquisition gets a fresh random owner id,
// so two goroutines never share a lock by accident. The id must be valid
// UTF-8 of 1 to 256 bytes.
func WithOwner(id string) Option {
	return func(s *settings) {
		if id == "" || len(id) > 256 || !utf8.ValidString(id) {
			s.err = fmt.Errorf("%w: owner id must be valid UTF-8 of 1 to 256 bytes", ErrInvalidOption)
			return
		}
		s.owner, s.freshOwner = id, false
	}
}

// termOwner gives the acquisition a random owner id made for it alone
// (newOwnerID), overriding any WithOwner: it is then no shared identity,
// so nothing can nest into its lock (Election's terms).
func termOwner(id string) Option {
	return func(s *settings) { s.owner, s.freshOwner = id, true }
}

// MaxMetadataLen is the longest WithMetadata string, in bytes.
const MaxMetadataLen = backend.MaxMetadataLen

// WithMetadata attaches a description to the locks the acquisition takes
// (who and what holds it: a host, a process id, a job name), for operators:
// Inspect returns it, and so does ForceRelease for the holder it evicts.
// Backends that support inspection store it with the lock; the others
// ignore it. It must be valid UTF-8 of at most MaxMetadataLen bytes. A
// nested (reentrant) acquisition keeps the first hold's metadata. The
// string is stored in the clear in the backend: keep secrets out of it.
func WithMetadata(s string) Option {
	return func(st *settings) {
		if len(s) > MaxMetadataLen || !utf8.ValidString(s) {
			st.err = fmt.Errorf("%w: WithMetadata: want valid UTF-8 of at most %d bytes, got %d bytes", ErrInvalidOption, MaxMetadataLen, len(s))
			return
		}
		st.watched().metadata = s
	}
}

func (s *settings) metadata() string {
	if s.watching == nil {
		return ""
	}
	return s.watching.metadata
}

func (s *settings) minHold() time.Duration {
	if s.watching == nil {
		return 0
	}
	return s.watching.minHold
}

// WithMinHold keeps the lock taken until at least d after the acquisition
// (measured from the moment the grant reached this process, after any
// wait for the lock), even when the lease is
// released sooner: ShedLock's lockAtLeastFor, for jobs that run on several
// hosts whose timers fire at slightly different moments, so that a host
// whose timer fires late finds the lock still taken instead of running the
// job again. A job that runs longer than d is unaffected: the lock is
// released when the lease is.
//
// What Release does before the minimum hold has passed depends on the
// backend:
//   - Expiring backends: Release gives up the hold, owner-checked, and
//     sets the lock to expire when the minimum hold ends, rounded up to
//     the backend's expiry granularity (mem://, redis and memcached:
//     backend.DelayedReleaser); where the backend cannot (redlock, the SQL
//     row modes) it refreshes the lock to at least then — a refresh never
//     shortens, so up to one TTL later. Either way nothing refreshes it
//     after, and the lock expires on the server: no process needs to stay
//     alive for it. If that refresh
//     cannot reach the backend, Release returns the error and the lock
//     expires at its TTL, possibly before the minimum hold ends. Close of
//     the Locker with the lease still held does the same (the process
//     may exit; the lock stays taken until the minimum hold ends).
//   - Session-bound backends whose locks do not expire (ZooKeeper, MySQL
//     forupdate, PostgreSQL advisory): the lock lives as long as the
//     session, so Release returns at once and the Locker releases the lock
//     when the minimum hold ends. Closing the Locker, or the end of the
//     process or its session, frees it at once: keep the process up until
//     the minimum hold ends (distlock run --min-hold does).
//
// In both cases the lease ends for its holder at Release (Err, Done and
// Context report it released). On Expiring backends without
// backend.DelayedReleaser (redlock, the SQL row modes) the refresh leaves the hold in
// place, into which a later lease of the same owner would nest: there
// WithMinHold together with WithOwner fails with ErrInvalidOption. d must be between 0 (none, the default)
// and MaxTTL, and on an Expiring backend no longer than a TTL the backend
// accepts (memcached: 30 days); else the acquisition fails with
// ErrInvalidOption before anything is taken.
//
// The minimum hold is kept only by a hold whose protected work ran: what
// distlock gives back on its own before any work (the members an
// AcquireAll or TryAcquireAll that failed had taken, a Lead term whose fn
// never began) is freed at once.
func WithMinHold(d time.Duration) Option {
	return func(s *settings) {
		if d < 0 || d > MaxTTL {
			s.err = fmt.Errorf("%w: WithMinHold(%v): want 0 to MaxTTL (%v)", ErrInvalidOption, d, MaxTTL)
			return
		}
		s.watched().minHold = d
	}
}

// WithAutoRefresh turns automatic refresh on (the default) or off. When on,
// distlock refreshes the lease about every ttl/3 (more often when the
// backend's validity for ttl is under 2/3 of it) until Release; a refresh
// that fails, or cannot reach the backend before the lease's local validity
// deadline, ends the lease with ErrLockLost. Refreshes of all leases of a
// Locker share one scheduler goroutine and a small bounded worker pool.
func WithAutoRefresh(on bool) Option {
	return func(s *settings) { s.autoRefresh = on }
}

// WithRetry sets how Acquire waits between attempts on backends that cannot
// wait natively. With Notify the policy's delay is only the fallback for a
// lost notification.
func WithRetry(p RetryPolicy) Option {
	return func(s *settings) {
		if p == nil {
			s.err = fmt.Errorf("%w: nil RetryPolicy", ErrInvalidOption)
			return
		}
		s.retry = p
	}
}

// RetryPolicy chooses the pause before retry number attempt (1 for the first
// retry). It is called concurrently and must hold no state between calls.
// There is no attempt limit: Acquire waits until its context ends, so a
// waiter never gives up before a crashed holder's lock expires.
type RetryPolicy interface {
	Delay(attempt int) time.Duration
}

// Backoff is a jittered, capped exponential backoff: the pause before retry
// n is uniformly random in [d/2, d] with d = min(Max, Min·2^(n−1)). The
// random jitter spreads competing clients apart (the Redlock paper's
// advice). Backoff is a value: it holds no state between calls.
type Backoff struct {
	Min, Max time.Duration
}

// DefaultRetry is the policy used without WithRetry: 5 ms doubling up to
// 250 ms.
var DefaultRetry RetryPolicy = Backoff{Min: 5 * time.Millisecond, Max: 250 * time.Millisecond}

// Delay implements RetryPolicy.
func (b Backoff) Delay(attempt int) time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = time.Millisecond
	}
	if hi < lo {
		hi = lo
	}
	d := lo
	for i := 1; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + rand.N(d/2+1)
}

// WithRetryUnavailable makes Acquire ride out transient unavailability of
// the backend: an attempt that fails because the backend cannot be reached
// or cannot answer for now (connection refused or reset, a timeout, a
// failover in progress: LOADING, READONLY, MASTERDOWN, TRYAGAIN, no
// quorum) is retried, with the RetryPolicy's pauses, until ctx ends. Errors
// of configuration or authentication (a wrong password, a TLS handshake
// that fails, an invalid key or TTL) still end Acquire at once. When ctx
// ends during an outage, the error wraps ErrNotAcquired and ctx's error,
// and carries the last attempt's backend error (the refused dial, the
// server's answer) as its cause. Off by default: without it an unreachable backend
// fails Acquire with ErrUnavailable at once. TryAcquire is never retried.
func WithRetryUnavailable(on bool) Option {
	return func(s *settings) { s.retryUnavailable = on }
}

// CheckOptions reports the first unusable value among opts (an owner id
// that is not valid UTF-8, a nil RetryPolicy, a TTL that is not positive or
// above MaxTTL) as the error an acquisition with them would return, so that
// a backend's New refuses bad default options at construction. A TTL below
// a backend's own minimum is that backend's to check.
func CheckOptions(opts ...Option) error {
	s := defaultSettings()
	for _, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: nil Option", ErrInvalidOption)
		}
		o(&s)
	}
	if s.err != nil {
		return s.err
	}
	if s.ttl <= 0 || s.ttl > MaxTTL {
		return fmt.Errorf("%w: WithTTL(%v): want a positive TTL of at most MaxTTL (%v)", ErrInvalidTTL, s.ttl, MaxTTL)
	}
	return nil
}
