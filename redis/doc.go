// Package redis is distlock's backend for one Redis: a single server, a
// Sentinel-managed master, or a Redis Cluster, through any go-redis
// UniversalClient. It registers the URL schemes "redis" and "rediss" (one
// server, TLS), "redis+cluster" and "rediss+cluster" (Redis Cluster), and
// "redis+sentinel" and "rediss+sentinel" (a Sentinel-managed master).
//
// # Mechanism
//
// A lock is a Redis hash holding the owner, the fencing token and one field
// per hold, with a PX expiry. Every operation is one Lua script in one round
// trip (EVALSHA, falling back to EVAL on NOSCRIPT); the scripts are the
// .lua files of internal/redislua, embedded, with one owner check shared by
// release, fair release and refresh:
//
//   - Acquire: SET NX PX semantics — if the key is absent, INCR the
//     fencing counter of the key's Cluster slot and create the hash with
//     the TTL, the lock's plain name and its metadata; if the same owner
//     holds it, add a hold (reentrancy) and extend the expiry to
//     max(remaining, ttl); otherwise change nothing and report the holder's
//     remaining PTTL.
//   - Release: owner-checked compare-and-delete. Only the holder (owner,
//     token and the acquisition's own hold id must match) can remove its
//     hold; when the last hold goes the key is deleted and, if someone
//     waits (a busy attempt or an Inspect marked the lock), a wake-up is
//     PUBLISHed on the key's channel. A stale holder — one whose lock
//     expired and was taken over, as in the classic scenario — changes
//     nothing and gets ErrNotHeld.
//   - Release within a minimum hold (distlock.WithMinHold; the driver is a
//     backend.DelayedReleaser): one owner-checked script removes the hold,
//     records in the field lg the server time at which the minimum hold
//     ends (the later of the old and new ends) and sets the key to expire
//     then — sooner than the TTL if need be, never shorter while other
//     holds of the owner remain; their last Release leaves the key until
//     lg instead of deleting it. Nothing is published (the lock is not
//     free); the owner may nest into the lingering lock, another owner
//     finds it busy with its PTTL. A fair lock's queue is left alone: its
//     waiters take the lock when the key expires, as after a crashed
//     holder.
//   - Refresh: owner-checked compare-and-PEXPIRE that never shortens the
//     expiry. Refreshes due together are sent in one pipeline
//     (backend.BatchRefresher).
//
// Acquire, release and refresh requests that one Locker's goroutines make
// while another of its requests is in flight queue, and go out together as
// one pipeline (one write, one read) the moment the connection is free —
// natural batching (internal/redislua.Batch): a lone request is sent at
// once, never delayed by a timer. A request whose ctx ends while it is
// queued is never sent; one whose ctx ends after it was sent returns at
// once and is undone in the background when its answer comes, as any
// abandoned round trip.
//
// All keys of one lock carry the same hash tag, derived from the SHA-256 of
// the key, so they sit in one Cluster slot; any key of 1 to 1024 bytes with
// any content maps to fixed-length names (see internal/redislua for the
// layout). Because the names are hashed, the lock hash also stores the
// lock's plain name (field "name") and the first hold's WithMetadata (field
// "meta", only when not empty; a nested hold keeps the first one's): an
// operator who runs redis-cli --scan --pattern 'distlock:*' and HGETALL on
// a key sees what it locks, who holds it (field "o") and its token ("t").
//
// # Fencing records
//
// Tokens come from one counter per Redis Cluster hash slot, not one per
// lock name: <prefix>fence{<tag>}, with a 4-character tag chosen (once,
// deterministically) to land in that slot, and the lock key's slot computed
// as Redis does (CRC16 mod 16384 of the hash tag). A script may touch only
// keys of one slot in a Cluster, so each lock's counter lives in its slot;
// on one server the same layout applies. The guarantees:
//
//   - tokens are strictly increasing per lock name, across owners,
//     expiries, forced releases and takeovers (while the counter survives:
//     see Capabilities);
//   - at most 16,384 counter keys per prefix exist, ever, however many
//     distinct names are locked (TestFenceKeysBounded: 100,000 distinct
//     locks leave 16,349 keys, where per-name counters left 100,000); the
//     counters have no expiry, on purpose: they keep tokens increasing;
//   - names in one slot share a counter, so a lock's tokens jump by the
//     acquisitions of the other names in its slot: compare tokens of one
//     name only, never expect them consecutive.
//
// Upgrading from per-name counters (<prefix>{<key tag>}:fence): an
// acquisition that finds the lock's old counter takes a token above both
// it and the slot's counter, then deletes it, so tokens keep increasing
// across the upgrade (TestFenceUpgrade). Stop clients of the old version
// before starting new ones: an old client still taking tokens from the
// per-name counter after a new one deleted it would start again from 1.
//
// Waiting: a waiter is woken by the release's pub/sub message. Every
// Locker shares ONE pub/sub connection among all its waiters, subscribing
// and unsubscribing per-key channels as waiters come and go; a waiter is
// subscribed (the server has confirmed the SUBSCRIBE) before its retry, so a
// release in between is not missed, and each wait is capped at the holder's
// remaining TTL, so a holder that expires without a release (a crash) is
// noticed without a message. If the subscription cannot be made the waiter
// polls with its retry policy instead. When the shared connection breaks
// (a network blip, CLIENT KILL, a client-output-buffer-limit or maxclients
// refusal), messages published meanwhile are lost: every waiter attempts
// again at the break, at each failed reconnection, and once its channel's
// resubscription is confirmed, so a release made while the channel was
// down is found then rather than at the holder's expiry. In a Redis Cluster the messages are
// ordinary PUBLISH messages, which the cluster forwards to every node.
//
// # Fair queue (WithFair, fair=true)
//
// With WithFair, waiters queue in Redis itself: a sorted set per key orders
// them by arrival across every Locker, process and host that uses WithFair,
// and a free lock goes only to the first live waiter. The release that
// frees the lock writes it for that waiter (its owner, a new fencing token
// and the TTL it asked for) and publishes the grant on the key's channel:
// the waiter holds the lock on receiving the message, without another round
// trip, which makes a handoff one message instead of a message and an
// acquire. A waiter renews its queue entry with an attempt at least every
// second; an entry not renewed for 3s (its waiter crashed or is paused) is
// skipped, and a waiter whose ctx ends leaves the queue at once, releasing
// the lock if it was granted meanwhile. A waiter that misses its grant
// message (a reconnection) finds the grant with its next attempt. The
// granted lease's validity counts from the waiter's last attempt plus the
// time the server says passed until the grant (less 1%, and never later
// than the message's arrival), not from the arrival itself, so a waiter
// paused in between does not overestimate it; the elapsed part comes from
// the server's clock, which a clock step distorts as it distorts every
// Redis expiry. A departing waiter's leave is never dropped under load
// (one background release per waiter), and a waiter that cannot subscribe
// polls at least every third of its TTL, so a grant is not left unused.
// The price, measured side by side: an uncontended TryAcquire+Release about
// 10% slower (the scripts also look at the queue) and two more Redis keys per
// contended lock (<lock>:q and <lock>:w, expiring 6s after the last waiter).
// Lockers without WithFair on the same key do not queue: they can take a
// free lock ahead of the queue, though never one granted to a waiter. A
// waiter that crashes within 3s of its last attempt can still be granted
// the lock, which then stays unused until its TTL, as a crashed holder's
// would. Reentrancy overrides the queue: waiters that share an owner
// (WithOwner) nest as soon as that owner holds the lock — granted, or
// taken by one of them — each handed a hold of its own by the same script
// and its own grant message, wherever it stands in the queue and in
// whichever Locker it waits (TestFairSameOwnerQueued).
//
// # Inspection and forced release
//
// The Locker implements Locker.Inspect and Locker.ForceRelease
// (backend.Inspector, backend.ForceReleaser), each one Lua script, atomic
// on the server:
//
//   - Inspect reads the lock hash and its PTTL, changing nothing: holder
//     (owner id), metadata, token, the number of nested holds, and the TTL
//     left by the server's clock. Waiters is, with WithFair, the number of
//     live entries in the fair queue (0 means none), and -1 otherwise:
//     plain waiters wait in their own processes, subscribed to the key's
//     channel, and Redis does not count them per lock. So a fair Locker's
//     count leaves out waiters of Lockers without WithFair on the same key
//     (every Locker of a fair key should use WithFair; see above).
//   - ForceRelease deletes the lock whatever its owner and holds, and
//     returns what it deleted (Held false, and nothing changed, for a free
//     key). In the same script it hands the lock on as a release that frees
//     it would: publishes the wake-up waiters listen to, or with WithFair
//     grants it to the first live waiter of the queue. The fencing counter
//     is untouched, so the next holder's token is higher than the evicted
//     one; the evicted holder's holds are gone, so its Refresh and Release
//     get ErrNotHeld and its lease ends at its next refresh. What ran under
//     the lock is not stopped: a fenced resource refuses its old token.
//
// # Capabilities
//
// Fencing, Reentrant, Notify and Expiring — and Fair with WithFair:
//
//   - Not Durable. Without persistence a restarted Redis has forgotten
//     every lock: another owner can take a lock its holder still believes
//     it has (until that holder's next refresh fails). With the default AOF
//     policy (appendfsync everysec) up to a second of acquisitions can be
//     lost in a crash; only "appendonly yes" with "appendfsync always"
//     writes each acquisition to disk before replying, and even then the
//     lost-lock window depends on the OS and disk honouring fsync.
//   - Failover loses locks. Redis replication is asynchronous: a master can
//     acknowledge an acquisition and fail before the replica has it; the
//     promoted replica then grants the same lock to another owner, while
//     the first holder's lease still looks valid until its next refresh,
//     and issues the same fencing token again (the counter's INCR was lost
//     with the grant). The Sentinel and Cluster clients fail over
//     automatically, so this applies to them. WithWaitReplicas
//     (wait_replicas=) narrows it to failovers onto a replica that did not
//     acknowledge the grant (see "Replicated grants" below); Redlock over
//     independent masters or a consensus-backed store (ZooKeeper, etcd)
//     avoids it.
//   - Fencing tokens are strictly increasing only while the counter
//     survives: a Redis restarted without persistence (or failed over to a
//     replica that lacks the last INCRs) starts the counter again and
//     tokens can repeat. If fencing must hold across restarts, run Redis
//     with "appendonly yes" and "appendfsync always"; across failovers,
//     use WithWaitReplicas with n the number of replicas.
//   - Not SessionBound: Redis has no client sessions that own keys; a dead
//     holder's lock is freed by its TTL.
//   - Not Fair without WithFair: a release wakes one waiter per Locker —
//     the one of that Locker that has waited longest — not every waiter; a
//     woken waiter that then leaves without the lock hands the wake-up on
//     to the next, and one that takes it (or nests into its owner's hold)
//     marks the lock for the others, whose wake-up its release publishes,
//     so no release is lost. An Election observer is woken by every
//     release and takes no waiter's wake-up. The first retry to
//     reach Redis wins: waiters of different Lockers (processes, hosts)
//     race, and one woken late can lose to a newcomer's first attempt.
//   - Eviction: a maxmemory policy other than noeviction (or volatile-* on
//     a busy instance) can evict a live lock key. Run lock keys on an
//     instance with maxmemory-policy noeviction.
//
// TTLs must be whole milliseconds of at least 3ms (PX is in milliseconds;
// anything finer is refused with ErrInvalidTTL rather than rounded). The
// validity distlock counts from each request's send time is the TTL less
// 1% and 2ms of clock-drift allowance (backend.DefaultValidity).
//
// # URLs
//
//	redis://[user:password@]host:port[/db][?param=value&...]
//	rediss://...   (TLS; skip_verify=true disables certificate checks)
//
// The standard parts and go-redis's own query parameters (dial_timeout,
// read_timeout, write_timeout, pool_size, pool_timeout, max_retries,
// client_name, protocol, ...) are parsed by go-redis's ParseURL. distlock
// adds prefix= (WithPrefix), subscribe_timeout= (WithSubscribeTimeout) and
// subscription_linger= (WithSubscriptionLinger), as Go durations,
// fair=true (WithFair), and wait_replicas=n with wait_timeout=d
// (WithWaitReplicas; d defaults to 500ms and must be below read_timeout).
// Any other parameter, a malformed URL or several hosts is an
// ErrInvalidOption. One redis:// URL names one server; a Redis Cluster and
// a Sentinel-managed master have URLs of their own:
//
//	redis+cluster://[user:password@]host:port[,host:port...][/][?param=value&...]
//	redis+sentinel://[user:password@]host:port[,host:port...][/db]?master=name[&param=value...]
//	rediss+cluster://..., rediss+sentinel://...   (TLS)
//
// A Cluster URL lists seed nodes (the client learns the slot map from any
// of them and follows MOVED and ASK); its credentials apply to every node,
// go-redis's connection parameters per node, and it has no db (a Cluster
// has only database 0). A Sentinel URL lists sentinels (port 26379 by
// default) and names the monitored master with master=; its credentials
// are the data nodes' (sentinels are contacted without AUTH: for sentinels
// that require a password, build a go-redis FailoverClient and call New).
// With TLS, each node's certificate is checked against the address dialled.
// Both take the parameters of redis:// URLs, checked the same way.
//
// Opening a URL does not connect (like database/sql.Open): an unreachable
// server shows up as ErrUnavailable from Acquire and TryAcquire, within
// their context. The Locker owns the client it created and closes it in
// Close.
//
// # Replicated grants (WithWaitReplicas, wait_replicas=)
//
// With WithWaitReplicas(n, d), every lock acquisition (plain, fair,
// multi-key) and every refresh is confirmed before it is reported: on the
// node that granted it, one connection sends an owner-checked rewrite of
// the hold (a write after the grant in the replication stream) and
// WAIT n d. A grant that fewer than n replicas acknowledged within d is
// released, owner-checked, and reported as ErrNotReplicated (which wraps
// ErrUnavailable); a refresh so reported does not count, and an
// auto-refreshed lease is lost when its validity runs out without a
// confirmed one.
//
// It guarantees that a reported lease was on the primary and on n
// replicas when reported, so a failover to one of them keeps the lock and
// a fencing counter at or above its token: tokens keep increasing across
// such a failover. It does not make Redis a consensus store: a failover to
// a replica that did not acknowledge (n below the number of replicas, or
// a replica restarted without persistence) can still grant a lock twice
// and reissue tokens; the acknowledgement is of the replica's memory, not
// its disk; a grant reported not replicated may have reached a replica
// (it is released on the primary, or expires by its TTL). With fewer than
// n replicas up, every acquisition fails. Semaphore permits are not
// confirmed. WAITAOF (Redis 7.2) is not used.
//
// # Errors
//
// A server that cannot be reached, a pool timeout, an I/O error or an error
// reply such as LOADING, READONLY or OOM yields an error wrapping
// ErrUnavailable, with the go-redis error reachable through errors.As and
// errors.Is. The driver returns go-redis's errors as they are and its
// ErrorCode (errors.go) classifies them once: a refused, reset or
// timed-out connection, a pool timeout and the replies of a server that is
// loading or failing over (LOADING, READONLY, MASTERDOWN, TRYAGAIN,
// CLUSTERDOWN, BUSY) are transient, which distlock.WithRetryUnavailable
// waits out; refused credentials (NOAUTH, WRONGPASS), a TLS failure and
// other error replies are not. An acquisition whose outcome is unknown (the request may have
// reached Redis but no reply came) is undone in the background: its unique
// hold is removed, owner-checked, within min(TTL, 5s). Because the request
// may still be on its way (a slow network, a paused server), one release
// that finds nothing does not end the undo: it tries again several times
// over that bound, so an acquire landing after the first try is removed
// too (TestDelayedRequestUndone).
//
// (*distlock.Locker).As answers *goredis.UniversalClient with the Locker's client.
package redis
