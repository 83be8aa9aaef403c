// Package redlock is distlock's Redlock backend: one lock over N
// independent Redis masters, held when a majority of them granted it within
// the lock's validity. It registers the URL scheme "redlock".
//
// # Mechanism
//
// Each master runs the same per-node scripts as package redis (see
// internal/redislua): a lock is a hash with the owner and one field per
// hold, with a PX expiry; acquire has SET NX PX semantics plus reentrancy,
// release is an owner-checked compare-and-delete that publishes a wake-up
// when it frees the lock, refresh an owner-checked compare-and-PEXPIRE that
// never shortens the expiry. On top of them, as the seeds describe Redlock:
//
//   - Acquire: take the monotonic time and send the acquire script, with the
//     same owner, a hold id unique to this attempt and the TTL, to all N
//     nodes in parallel, each bounded by a per-node timeout far below the
//     TTL (default 50ms, capped at the validity). The lock is held when a
//     quorum of N/2+1 nodes granted it and validity is left:
//     ttl − elapsed − drift > 0, with drift = ttl·0.01 + 2ms (configurable).
//     The lease's local validity deadline is exactly that: distlock counts
//     ttl − drift from the moment the request was sent (the driver's
//     TTLPolicy), and an attempt whose quorum came after its validity fails
//     with ErrUnavailable rather than return an expired grant. The attempt
//     returns as soon as the outcome is decided — a quorum granted, or too
//     many nodes refused or failed for one — and slower nodes finish in the
//     background.
//   - On failure (no quorum, or no validity left) the attempt gives back its
//     hold on every node that granted it or may have: nodes that said yes
//     are released before the attempt returns; nodes whose answer was lost
//     (a timeout or I/O error after the request was sent: the script may
//     have run, or may still run) are released in the background, several
//     times over about 4.5s, because one release can arrive before a delayed
//     acquire and find nothing; a node still working when the attempt was
//     decided is released as soon as its answer comes, so the release cannot
//     overtake its acquire. Nodes that answered "busy" changed nothing. A
//     give-back never announces itself (publishes nothing): the minority it
//     frees is of use only once the other minorities are gone, and a
//     wake-up would send the waiters — its own Locker's first — after the
//     same minorities again, in a loop for as long as they stay (see
//     Waiting).
//   - Release: on every node, whether or not the acquire succeeded there
//     (after any acquire still running on it). It returns once a quorum
//     released the hold — the lock is then free for the next owner — and
//     the other nodes finish in the background; it returns ErrNotHeld when a
//     majority no longer had the hold (it expired or was taken over).
//   - Refresh: on every node in parallel; it succeeds only if a quorum
//     extended the lock within the validity of the new TTL. It returns
//     ErrNotHeld when a majority no longer has the hold (distlock ends the
//     lease with ErrLockLost), and ErrUnavailable otherwise (distlock keeps
//     the lease until its validity deadline, retrying, and then ends it).
//     Automatic refreshes due together go to each node in one pipeline.
//   - Batching: the acquire, release and refresh requests that a Locker
//     sends to one node while another is in flight there queue and go out
//     together as one pipeline when it is answered (a lone request is sent
//     at once); a queued request whose operation ended is never sent.
//   - Waiting: distlock retries a busy lock when a release is announced on
//     any node, or after a delay, whichever comes first. A waiter subscribes
//     on every node (one shared pub/sub connection per node and Locker) and
//     waits for N − quorum + 1 confirmations (or the end of its context), so
//     at least one node of any holder's quorum will announce the release to
//     it. A node whose pub/sub connection breaks wakes its waiters at the
//     break and again once their channel's resubscription is confirmed, so
//     a release announced while it was down is found then. The delay is the time until enough busy nodes can free up for a
//     quorum, each busy node counted by the age of its holder's newest hold
//     (server time, returned with the "busy" answer): a hold taken within
//     two of the attempt's own durations belongs to a contender in the
//     middle of its attempt, which gives it back at once — a split vote,
//     after which the delay is short and random, so that contenders do not
//     retry in lockstep (the seeds' advice); a hold younger than two
//     per-node timeouts belongs to a slow contender that has not given it
//     back yet, or to a dead one: it is looked at again after as long as it
//     has existed, and at the latest once it is two per-node timeouts old;
//     any other hold (and any lock one owner holds on a quorum) frees up
//     when it expires, so a crashed holder is
//     taken over after its TTL without any message, and minorities left by
//     contenders that died mid-attempt cost a waiter a few attempts until
//     the first of them expires, not one per round trip
//     (TestNoQuorumPossible). Waiters never give up before their context
//     ends; one whose context ends while its attempt has "busy" answers and
//     no failure gets ErrNotAcquired.
//
// An attempt fails with ErrUnavailable when failed nodes make a quorum
// impossible (more than N − quorum of them down, timed out or refusing),
// joining one *NodeError per failed node (errors.As reaches them, and
// through them go-redis's errors). That error is transient
// (distlock.WithRetryUnavailable waits it out) unless the nodes that failed
// for a reason waiting will not cure — refused credentials, TLS, error
// replies other than those of a server starting or failing over — leave
// too few for a quorum (see the driver's ErrorCode). When the nodes answered but other owners
// hold the lock on too many of them it fails with ErrNotAcquired, as a
// *backend.BusyError carrying the time until enough of them expire.
//
// # Capabilities
//
// Reentrant, Notify and Expiring — and only these:
//
//   - Not Fencing: Token is always 0. A fencing token must increase strictly
//     over every acquisition of a key, but N independent masters share no
//     counter: per-node counters differ from node to node, a quorum's
//     maximum can repeat or go backwards when nodes restart or two quorums
//     share a single node, and nothing orders two grants that the algorithm
//     believes disjoint in time. This is Kleppmann's critique of Redlock:
//     its safety rests on timing assumptions (bounded process pauses,
//     network delays and clock drift), and without a fencing token a holder
//     paused past its validity (GC, SIGSTOP, a slow network) can still write
//     after another owner acquired. distlock makes such a holder see its
//     loss (Done, Err, Context) as soon as it runs again, but cannot stop a
//     write it already issued. Where the lock guards correctness rather than
//     efficiency, use a backend with fencing tokens — redis (one master),
//     zookeeper, mysql or postgres — and have the protected resource refuse
//     stale tokens (package fence); its guards refuse Redlock's token 0
//     (fence.ErrZeroToken).
//   - Not Durable, and restarts are the known hazard. A master restarted
//     without persistence (or crashed under appendfsync everysec) has
//     forgotten the locks it granted. If a holder has a bare quorum — A, B,
//     C of five — and C restarts at once, another owner can lock C, D and E
//     and hold the lock at the same time as the first (TestRestartHazard
//     shows it). The documented remedy is a delayed restart: keep a crashed
//     master down, or refusing clients, for at least the longest TTL in use,
//     so that every lock it took part in has expired, or been lost by its
//     holder, before it serves again (TestDelayedRestartRemedy, and the
//     conformance server faults). "appendonly yes" with "appendfsync
//     always" also closes the hole, at a cost in latency, as far as the
//     disks honour fsync.
//   - Clocks matter. Validity is counted on this process's monotonic clock,
//     expiry on each master's clock. A master whose clock jumps forward
//     expires the lock early. With the holder on every master that is
//     harmless: one jumped node gives nobody a quorum, and the holder keeps
//     refreshing on the others (TestClockJump). With the holder on a bare
//     quorum and the other masters free, one jump lets another owner in
//     (also shown there). The drift allowance covers rate differences of
//     about 1%, not jumps: run the masters with a slewing time daemon, never
//     stepping their clocks.
//   - Not SessionBound: a dead holder's lock is freed by its TTL.
//   - Not Fair: a release wakes one waiter per Locker — the one that has
//     waited longest, the same on every node — and the first attempt to
//     reach a quorum wins.
//   - Failover: give Redlock independent masters, not Sentinel-managed
//     ones: a promoted replica can lack a lock (replication is
//     asynchronous), which is the restart hazard again.
//   - Eviction: run the masters with maxmemory-policy noeviction; an evicted
//     lock key acts like a restart.
//
// TTLs must be whole milliseconds (PX), leave validity after the drift
// allowance (with the defaults at least 3ms) and should be far above the
// per-node timeout. Keys are hashed (SHA-256) into fixed-length names, so any
// key of 1 to 1024 bytes works; no fencing counter key is created. Each
// node's lock hash also stores the lock's plain name (field "name") and the
// first hold's WithMetadata (field "meta", only when not empty), so that an
// operator who scans a node (redis-cli --scan, then HGETALL) can tell what
// a hashed key locks.
//
// # Inspection and forced release
//
// The Locker implements Locker.Inspect and Locker.ForceRelease
// (backend.Inspector, backend.ForceReleaser). There is no single truth to
// read, so both ask every node in parallel (one script each, within the
// per-node timeout; ForceRelease waits at least MinReleaseWait) and merge
// the answers:
//
//   - Inspect reports the owner that a quorum of nodes shows as holder:
//     its metadata, its nested holds (those present on a quorum of its
//     nodes), Token 0 (no fencing), and as TTL the SMALLEST remaining PTTL
//     among those nodes, by each node's own clock — a lower bound: the lock
//     may stay held on a quorum somewhat longer. Waiters is -1 (waiters
//     wait in their own processes). Held is false when no owner can have a
//     quorum even counting every node that did not answer; when the nodes
//     that did not answer could decide it either way (too many down) the
//     error wraps ErrUnavailable.
//   - ForceRelease deletes the lock on every node, whatever its owner,
//     publishing the release wake-up on each, and reports the evicted
//     holder as Inspect would (a holder on fewer than a quorum of the nodes
//     that answered is still reported when the silent nodes could have
//     completed its quorum). It succeeds when a quorum of nodes deleted it:
//     no owner can hold a quorum then, the evicted holder's Refresh and
//     Release get ErrNotHeld, and the next Acquire can succeed at once.
//     Nodes that do not answer are left as they are (best effort: their
//     copy expires with its TTL). Fewer than a quorum of nodes cleared is
//     an error wrapping ErrUnavailable, with the lock deleted on those that
//     answered. Without fencing, a forced release cannot stop the evicted
//     holder's writes already under way: prefer waiting out its TTL.
//
// # URLs
//
//	redlock://[user:password@]h1:6379,h2:6379,h3:6379[/db][?param=value&...]
//
// Each comma-separated host is one master (port 6379 if omitted). The
// credentials, database and go-redis parameters (dial_timeout,
// read_timeout, pool_size, max_retries, ...) apply to every node. distlock
// adds node_timeout= (WithNodeTimeout, default 50ms), drift_factor= and
// drift_min= (WithDrift, default 0.01 and 2ms), prefix= (WithPrefix),
// subscribe_timeout= and subscription_linger=. Any other parameter, an empty
// or repeated host, or a port out of range is an ErrInvalidOption. Each node
// is dialled once per operation and a failed command retried once (unless
// max_retries says otherwise), so that a dead node answers within the
// per-node timeout. Opening does not connect: unreachable masters show up
// as ErrUnavailable from Acquire and TryAcquire within their context. The
// Locker owns the clients it created and closes them in Close. For existing
// clients use New.
//
// # Performance
//
// The fan-out is parallel: across a network, where round trips dominate, an
// uncontended acquire and release cost about what they cost on one Redis
// (BenchmarkRedlock/paired/rtt-2ms: 1.1×). On loopback a round trip is
// almost all CPU — client, kernel and server — so five nodes cost about five
// times the CPU, and on a small machine the ratio is CPU-bound.
//
// (*distlock.Locker).As answers *[]goredis.UniversalClient with the masters' clients, in node order.
package redlock
