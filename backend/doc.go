// Package backend is the driver interface that every distlock backend
// implements, and the registry that maps URL schemes to backends.
//
// A backend implements only its mechanism: one owner-checked attempt to take
// a lock, owner-checked release and refresh, and whatever optional
// interfaces its server makes possible. Everything shared — key and TTL
// validation, owner identities, waiting and backoff, auto-refresh, local
// validity deadlines, the lease state machine and error wrapping — lives once
// in package distlock, which wraps a Driver into a *distlock.Locker.
//
// The split follows database/sql and database/sql/driver: users program
// against distlock; backend authors program against this package.
//
// # Required
//
//   - Driver (TryAcquire, Capabilities, Close, Inspect, ForceRelease) and
//     the Lock it grants (Token,
//     Refresh, Release). Every method that can wait takes the caller's ctx
//     and returns when it ends; work that must outlive the call (an undo, an
//     unsubscription) goes on in the background, bounded by the driver, and
//     Close waits for it within its own bound.
//   - The operator calls, part of Driver: Inspector reads a lock without
//     taking it (holder, metadata — so the driver stores Request.Metadata
//     with every lock —, token, server-side TTL, waiters); ForceReleaser
//     frees a lock whatever its owner, keeping fencing tokens increasing.
//     ctx: both return when ctx ends. A backend that truly cannot do one
//     returns an error wrapping errors.ErrUnsupported.
//   - A constructor of one shape, New(client, ...Option)
//     (*distlock.Locker, error),
//     that checks every option value (ErrInvalidOption) and a URL opener
//     registered with Register that goes through the same checks.
//
// # Optional interfaces, each with its fallback
//
//   - Blocker: the backend waits natively (a server-side wait, a watch).
//     ctx: Acquire returns when ctx ends and leaves nothing behind.
//     Without it: distlock polls TryAcquire with the caller's retry policy.
//   - Notifier: the backend announces releases. ctx: Watch returns when ctx
//     ends, whatever the notification channel does. Without it: polling
//     only, at the retry policy's delays.
//   - HeldNotifier (with Notifier): a Notifier that wakes one watcher at a
//     time learns whether a leaving watcher holds the lock, and hands no
//     wake-up on for one that does. ctx: as Watch. Without it: every woken
//     watcher that leaves hands its wake-up on, costing the next one an
//     attempt when the leaver acquired.
//   - TTLPolicy: validity differs from ttl less 1% + 2 ms (coarse server
//     clocks, minimum TTLs). Without it: DefaultValidity.
//   - Issued: a lock granted after a wait inside the driver knows when the
//     server started its TTL. Without it: validity counts from the moment
//     the request was sent.
//   - Deadliner: a session-bound lock keeps a local session deadline.
//     Without it: only the lease's own validity deadline and the driver's
//     Request.Lost report loss.
//   - BatchRefresher: many locks refreshed in one round trip. ctx: one ctx
//     for the batch. Without it: one Refresh per lock, in parallel.
//   - DelayedReleaser: give up a hold and keep the lock taken a given time
//     longer. ctx: as Release. Without it: a refresh that never shortens,
//     so a minimum hold may last up to one TTL longer, and WithMinHold is
//     refused together with WithOwner.
//   - Semaphorer (with PermitBlocker, PermitNotifier): permits of counting
//     semaphores, each a Lock of its own; the count is the semaphore's
//     identity while held (PermitsError). ctx: as TryAcquire (and Acquire,
//     Watch). Without it: Locker.Semaphore refuses the backend with
//     ErrInvalidOption, and SemaphoreRefuser's reason where the driver
//     has one.
//   - MultiAcquirer: several free locks taken in one atomic request. ctx:
//     as TryAcquire. Without it: Locker.AcquireAll takes the keys one by
//     one in sorted order.
//   - Aser: the driver answers Locker.As with its client and the handles
//     its package exports for the backend's extras. Without it: As
//     reports false for every target.
//   - ErrorClassifier: the driver gives its client's errors their portable
//     meaning (Code) once; distlock wraps each error once in the sentinel of
//     its code. Without it: network errors are transient, others returned
//     as they are.
//
// # Error classes
//
// Each Code says what the caller can do about an error:
//
//   - CodeTransient (ErrUnavailable, a *TransientError): wait and retry — a
//     refused, reset or timed-out connection, a server loading or failing
//     over, a lost quorum of such answers. WithRetryUnavailable waits these
//     out.
//   - CodeUnavailable (ErrUnavailable): the backend cannot serve and
//     waiting will not cure it — a TLS failure, a host name that does not
//     resolve, an unexpected reply.
//   - CodeAuth (ErrAuth, never ErrUnavailable): the server refused the
//     credentials or a permission — a wrong or missing password, an
//     unknown user, an ACL or grant that forbids the command. Fix the
//     URL's user and password or the server's ACL.
//   - CodeMisconfigured (ErrMisconfigured, never ErrUnavailable): the
//     server accepted us but is not set up for the Locker — a missing
//     database, schema or lock table. Fix the URL or create what is
//     missing.
//
// The distlock CLI exits 69, 77 and 78 for these (EX_UNAVAILABLE,
// EX_NOPERM, EX_CONFIG).
//
// Errors a driver decides itself carry their sentinel (Busy for a held
// lock, ErrNotHeld, ErrLockLost, ErrInvalidTTL); errors of its client are
// returned raw, or wrapped with context by %w, and classified by ErrorCode.
// An error caused by the end of a ctx has one shape, ctx.Err() with its
// cause.
package backend
