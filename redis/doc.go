// Package redis is distlock's backend for one Redis: a single server, a
// Sentinel-managed primary or a Redis Cluster, through any go-redis
// UniversalClient. It registers the URL schemes "redis" and "rediss" (one
// server, TLS), "redis+cluster" and "rediss+cluster", "redis+sentinel" and
// "rediss+sentinel".
//
//	import _ "github.com/distlock/distlock/redis"
//
//	l, err := distlock.Open(ctx, "redis://127.0.0.1:6379/0")
//	l, err := distlock.Open(ctx, "redis+cluster://h1:6379,h2:6379")
//	l, err := distlock.Open(ctx, "redis+sentinel://s1:26379,s2:26379/0?master=locks")
//
// New wraps a go-redis client of your own, which Close leaves open unless
// WithCloseClient.
//
// # Guarantees
//
// A lock is a Redis hash (owner, fencing token, one field per hold) with a
// PX expiry, and every operation is one Lua script in one round trip.
// Release and refresh are owner-checked on the server (owner, token and
// the acquisition's own hold id): a holder whose lock expired and was
// taken over changes nothing and gets ErrNotHeld. Refresh never shortens
// the expiry. A release wakes one waiter per Locker through pub/sub; with
// WithFair (fair=true) waiters queue in Redis and are granted in arrival
// order. An acquisition whose answer was lost is undone in the background.
// The fencing token comes from a counter per Cluster slot: strictly
// increasing while that counter survives.
//
// Capabilities: Fencing, Reentrant, Notify, Expiring; Fair with WithFair.
// TTLs are whole milliseconds, at least 3 ms.
//
// # Not guaranteed
//
//   - Not Durable: a Redis restarted without "appendonly yes" and
//     "appendfsync always" has forgotten its locks and may repeat tokens.
//   - Failover loses locks: replication is asynchronous, so a promoted
//     replica may grant a lock again and reissue its token.
//     WithWaitReplicas (wait_replicas=n) reports a grant or refresh only
//     after WAIT confirms n replicas have it; a failover onto a replica
//     that did not confirm can still grant twice. For no double holder use
//     etcd or ZooKeeper, or fence the resource with the token.
//   - Not SessionBound: a dead holder's lock is freed by its TTL.
//   - An eviction policy other than noeviction can drop a live lock.
//
// URL parameters: go-redis's own (dial_timeout, read_timeout, pool_size,
// ...) and prefix, subscribe_timeout, subscription_linger, fair,
// wait_replicas and wait_timeout. A Cluster URL lists seed nodes and has
// no db; a Sentinel URL lists sentinels and names the primary with master=
// (its credentials are the data nodes'). Unknown or repeated parameters
// are ErrInvalidOption. Opening does not connect.
//
// Errors: unreachable servers and replies such as LOADING, READONLY,
// MASTERDOWN, TRYAGAIN (and a Cluster's ASK or MOVED that outlasted the
// client's redirects) are transient ErrUnavailable (WithRetryUnavailable
// waits them out); refused credentials are ErrAuth. On a Cluster client the
// driver itself retries, for up to 2s and within the caller's ctx, a script
// refused while its slot migrates (TRYAGAIN, or a MOVED or ASK that
// outlasted the client's redirects: the script did not run).
// go-redis's own log lines go to slog.Default at Debug.
//
// (*distlock.Locker).As answers *goredis.UniversalClient with the Locker's
// client.
//
// The mechanism, the fencing records, the fair queue, the URL forms, the
// failover figures and what WAIT guarantees are in docs/backends/redis.md.
package redis
