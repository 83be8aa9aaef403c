// Package memory is distlock's in-process backend, registered as "mem://".
//
// It is the reference the conformance suite is validated against and the
// embedded default for examples, the CLI demo and users' own unit tests.
// Lockers opened with the same URL in one process share one lock namespace
// ("mem://" the default one, "mem://name" another), so they contend as
// clients of one server would. Each Locker is one client session.
//
// Inspection (Locker.Inspect) and forced release (Locker.ForceRelease)
// are supported; a forced release tells the evicted holder's lease at once.
//
// Semaphores (Locker.Semaphore) are supported too: a table of permit
// holders per key, apart from the locks, session-bound and expiring as
// locks are, with a per-key token counter and release notifications.
//
// Capabilities: Fencing (a per-key counter that outlives the lock),
// Reentrant, Notify and Fair (waiters queue in arrival order and the lock is
// handed to the first of them on release or expiry, together with a nested
// hold for every queued waiter of the same owner), SessionBound (closing a
// Locker, or Crash, frees its locks at once) and Expiring (TTL on Go's
// monotonic clock). Not Durable: the lock table lives and dies with the
// process, so there is no server restart for a lock to survive.
//
// (*distlock.Locker).As answers *Session (Crash, a simulated client crash) and **Namespace.
package memory
