// Package backend is the driver interface that every distlock backend
// implements, and the registry that maps URL schemes to backends.
//
// A backend implements only its mechanism: one owner-checked attempt to take
// a lock, owner-checked release and refresh, and whatever optional
// interfaces its server makes possible. Everything shared — key and TTL
// validation, owner identities, waiting and backoff, auto-refresh, local
// validity deadlines, the lease state machine and error wrapping — lives once
// in package distlock, which wraps a Driver into a *distlock.Locker. The
// split follows database/sql and database/sql/driver.
//
// # Required
//
//   - Driver (TryAcquire, Capabilities, Close, Inspect, ForceRelease) and
//     the Lock it grants (Token, Refresh, Release). Every method that can
//     wait returns when its ctx ends; work that must outlive the call runs
//     in the background, bounded by the driver, and Close waits for it
//     within its own bound.
//   - Inspect reads a lock without taking it, so the driver stores
//     Request.Metadata with every lock; ForceRelease frees a lock whatever
//     its owner, keeping tokens increasing. A backend that cannot do one
//     returns an error wrapping errors.ErrUnsupported.
//   - A constructor New(client, ...Option) (*distlock.Locker, error) that
//     checks every option (ErrInvalidOption), and a URL opener registered
//     with Register that goes through the same checks.
//
// # Optional interfaces, each with its fallback
//
// Each method returns when its ctx ends, as the required ones do.
//
//   - Blocker: a native wait. Else distlock polls TryAcquire. For a
//     request it has no native wait for, Acquire returns ErrSkip.
//   - Notifier: release announcements. Else polling only. For a request
//     whose releases it does not announce, Watch returns a nil channel.
//   - HeldNotifier (with Notifier): no wake-up handed on by a watcher that
//     acquired a lock. Else every leaving watcher hands its wake-up on.
//   - TTLPolicy: a validity other than ttl less 1% + 2ms. Else
//     DefaultValidity.
//   - Issued: when the server started the TTL of a lock granted after a
//     wait. Else validity counts from the moment the request was sent.
//   - Deadliner: a local session deadline. Else only the lease's validity
//     and Request.Lost report loss.
//   - BatchRefresher: many refreshes in one round trip. Else one Refresh
//     per lock, in parallel.
//   - DelayedReleaser: release a hold and keep the lock a given time
//     longer. Else a never-shortening refresh, and WithMinHold is refused
//     with WithOwner.
//   - Permitter: permits of counting semaphores, requested through
//     TryAcquire, Blocker and Notifier with Request.Permits set; a mode
//     without them returns its reason. Else Locker.Semaphore refuses the
//     backend with ErrInvalidOption.
//   - MultiAcquirer: several free locks in one atomic request. Else
//     Locker.AcquireAll takes the keys one by one in sorted order.
//   - Aser: answers Locker.As with the backend's client and extras. Else
//     As reports false.
//   - ErrorClassifier: gives the client's errors their Code. Else network
//     errors are transient and others are returned as they are.
//
// # Error classes
//
// Each Code says what the caller can do about an error:
//
//   - CodeTransient (ErrUnavailable, a *TransientError): wait and retry.
//     WithRetryUnavailable waits these out.
//   - CodeUnavailable (ErrUnavailable): the backend cannot serve and
//     waiting will not cure it.
//   - CodeAuth (ErrAuth): the server refused the credentials or a
//     permission.
//   - CodeMisconfigured (ErrMisconfigured): the server is not set up for
//     the Locker (a missing database, schema or table).
//
// Errors a driver decides itself carry their sentinel (Busy for a held
// lock, ErrNotHeld, ErrLockLost, ErrInvalidTTL). Errors of its client are
// returned raw, or wrapped with %w, and classified once by ErrorCode. An
// error caused by the end of a ctx is ctx.Err() with its cause.
//
// Each interface's fallback and ctx rule in full, and examples of each
// error class, are in docs/backends/README.md.
package backend
