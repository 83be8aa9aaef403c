// Package etcd is distlock's etcd v3 backend: the lock recipe of etcd's own
// concurrency.Mutex (a key per waiter under the lock's prefix; the lowest
// create revision holds; each waiter watches only its predecessor's
// deletion), on go.etcd.io/etcd/client/v3. It registers the URL schemes
// "etcd" and "etcds" (TLS).
//
//	import _ "github.com/distlock/distlock/etcd"
//
//	l, err := distlock.Open(ctx, "etcd://user:password@h1:2379,h2:2379,h3:2379/prefix?session_ttl=10s")
//
// Dial is the typed equivalent; New wraps a *clientv3.Client of your own,
// which Close leaves open.
//
// # Guarantees
//
// A Locker has one session, one etcd lease shared by its locks and waiter
// keys. An acquisition writes its own waiter key with the lease and holds
// the lock when its key has the lowest create revision of the lock's
// prefix. Waiters are served in that order, and one release wakes one
// waiter. Release deletes the key compared on its create revision, so it
// never deletes another owner's key. A cancelled Acquire deletes its key
// before returning; a write whose answer was lost is resent or its key
// deleted in the background, never left to block others.
//
// The fencing token is the key's create revision: strictly increasing
// across holders, sessions, restarts and leader changes.
//
// A lock lives as long as the session: WithTTL is validated and otherwise
// ignored, and Refresh only checks that the key still exists. The Locker
// keeps the lease alive and ends every lease of the session with
// ErrLockLost at last answered keepalive + session TTL − margin, before the
// cluster can expire it, or at once when the cluster says the lease is
// gone. A held key deleted by another client (ForceRelease, etcdctl) ends
// its lease as soon as the Locker's one watch over its prefix delivers the
// deletion (WithHoldWatch). After a loss, later acquisitions use a new
// session.
//
// Capabilities: Fencing, Reentrant (per Locker), Notify, Fair,
// SessionBound, Durable.
//
// Locker.Inspect reads the first waiter key and the number of waiters in
// one linearizable transaction; Locker.ForceRelease deletes the holder's
// key compared on the revisions it read, so the reported holder is exactly
// the one evicted.
//
// # Not guaranteed
//
//   - Expiring: locks do not expire on a TTL; the session TTL is the
//     failover time of a dead or cut-off holder (default 10 s). Keep it
//     well above etcd's election timeout (default 1 s).
//   - A paused holder process keeps its lock until its lease expires; its
//     loss is declared as soon as it runs again. Pass the fencing token to
//     the resource you protect.
//   - A watch on a paused member stays silent until the member resumes.
//   - Waiters that lose their session lose their place in line.
//   - While a Locker holds a lock its hold watch receives every deletion
//     under its prefix, from every client.
//
// URL parameters: session_ttl (whole seconds from 2 s, default 10 s),
// session_margin, connect_timeout, hold_watch, log; on etcds://
// sslrootcert, sslcert and sslkey. A user name and password authenticate
// with etcd's auth; refused credentials are ErrAuth. Unknown parameters,
// unreadable certificate files and prefixes ending in "/" are
// ErrInvalidOption. An unreachable cluster fails at once with an
// ErrUnavailable naming each endpoint's dial error.
//
// (*distlock.Locker).As answers *Session (the current session lease's
// LeaseID and TTL) and **clientv3.Client.
//
// The mechanism, sessions and failover time, the comparison with
// concurrency.Mutex and the hold watch's cost are in docs/backends/etcd.md.
package etcd
