// Package redlock is distlock's Redlock backend: one lock over N
// independent Redis masters, held while a majority of them hold it. It
// registers the URL scheme "redlock".
//
//	import _ "github.com/distlock/distlock/redlock"
//
//	l, err := distlock.Open(ctx, "redlock://h1:6379,h2:6379,h3:6379")
//
// New wraps existing go-redis clients, one per master.
//
// # Guarantees
//
// An acquisition sends the same owner-checked script to every master in
// parallel, each bounded by a per-node timeout (WithNodeTimeout; 50ms for
// New, DefaultURLNodeTimeout by URL). It succeeds when a quorum of N/2+1
// masters granted it and validity is left: ttl − elapsed − drift, with drift = ttl·0.01 + 2ms
// (WithDrift). The lease's local deadline is that validity, counted from
// the moment the request was sent. A failed attempt gives its hold back on
// every master that granted it or may have.
//
// Release and Refresh are owner-checked on every master. Release returns
// once a quorum released; Refresh succeeds only when a quorum extended the
// lock within the new validity. Both return ErrNotHeld when a majority no
// longer has the hold.
//
// Waiters wake on a release announced by enough masters, or when the busy
// masters' holds can expire, whichever comes first. An attempt fails with
// ErrUnavailable, joining one *NodeError per failed master, when failed
// masters make a quorum impossible; with ErrNotAcquired, as a
// *backend.BusyError, when other owners hold too many masters.
//
// Capabilities: Reentrant, Notify, Expiring.
//
// # Not guaranteed
//
//   - Fencing: Token is always 0. Independent masters share no counter, so
//     a holder paused past its validity can still write after another
//     owner acquired. The guards of package fence refuse token 0. Where
//     the lock guards correctness, use redis, zookeeper, mysql or postgres.
//   - Durability: a master restarted without persistence forgets its
//     locks, and a second owner can then reach a quorum. Keep a crashed
//     master down for at least the longest TTL in use.
//   - Clocks: a master whose clock jumps forward expires locks early. Run
//     masters with a slewing time daemon.
//   - Fairness and session binding: the first attempt to reach a quorum
//     wins; a dead holder's lock is freed by its TTL.
//   - Failover: use independent masters, not Sentinel-managed ones, and
//     maxmemory-policy noeviction.
//
// TTLs are whole milliseconds and must leave validity after the drift.
// Keys of 1 to 1024 bytes are hashed (SHA-256) into fixed-length names.
//
// Locker.Inspect reports the owner a quorum shows, with the smallest
// remaining TTL among its masters. Locker.ForceRelease deletes the lock on
// every master and succeeds when a quorum deleted it.
//
// The URL form is
//
//	redlock://[user:password@]h1:6379,h2:6379,h3:6379[/db][?param=value&...]
//
// with go-redis's parameters for every node and node_timeout, drift_factor,
// drift_min, prefix, subscribe_timeout and subscription_linger. Anything
// else is ErrInvalidOption. Opening does not connect. The Locker closes the
// clients it created.
//
// (*distlock.Locker).As answers *[]goredis.UniversalClient with the
// masters' clients, in node order.
//
// The mechanism, the failure analysis (restarts, clock jumps, split votes)
// and measured costs are in docs/backends/redlock.md.
package redlock
