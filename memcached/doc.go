// Package memcached is distlock's backend for memcached, through
// github.com/bradfitz/gomemcache. It registers the URL scheme "memcached"
// (memcached://h1:11211[,h2:11211]); New wraps an existing *memcache.Client.
//
// memcached is a cache, not a lock service. This backend makes it as safe
// as memcached allows and says plainly below what memcached cannot promise:
// a lock can vanish before its TTL (eviction, restart, flush_all), and there
// are no fencing tokens. Use it where a lost lock costs duplicated work, not
// corrupted data.
//
// # Mechanism
//
// A lock is one item whose key is the prefix followed by the base64url
// SHA-256 of the lock's name (ItemKey), so every name of 1 to 1024 bytes,
// whatever its content, maps to a legal memcached key of at most 250 bytes
// without collisions. Its value records the owner, a random per-tenure
// nonce, the random ids of the owner's live holds, the expiry asked for,
// and the first acquisition's WithMetadata (nested holds keep it):
//
//   - Acquire: add with the TTL (plus one second, see below) as expiry —
//     memcached stores it for the first writer only. If the item exists, one gets reads it: held by
//     the same owner (WithOwner), a new hold id is added by compare-and-swap
//     (cas) and the expiry becomes max(remaining, ttl), never shorter;
//     held by another owner, the attempt fails with the holder's remaining
//     time as a hint for the waiter.
//   - Release: owner-checked compare-and-delete. gets reads the item;
//     unless it still records this owner, this tenure's nonce and this
//     acquisition's hold id, nothing changes and the caller gets
//     ErrNotHeld — a holder whose lock expired and was taken over (the
//     classic scenario) never touches the new owner's item, even with the
//     same WithOwner id, because the new tenure has another nonce. The
//     last hold is deleted with memcached 1.6's meta command
//     "md <key> C<cas>", which deletes only if the item is unchanged since
//     the gets (gomemcache has no meta protocol; the package speaks this one
//     command on its own connections). Where the server does not speak the
//     meta protocol, or the Locker does not know which server holds the key
//     (New without WithSelector), or ReleaseCAS is set, the item is instead
//     replaced by cas with an empty tombstone whose expiry is in the past,
//     which memcached treats as gone at once. Other holds are removed by cas.
//     Delete is never used: it would remove anyone's lock.
//   - Release within a minimum hold (distlock.WithMinHold; the driver
//     implements backend.DelayedReleaser): gets, check owner, nonce and
//     hold, then cas that swaps the hold for a linger mark ("~" and the
//     moment the minimum hold ends) and sets the item's expiry to that
//     moment, rounded up to whole seconds plus two ticks (so up to three
//     seconds late, never early, even across a jump of memcached's clock;
//     see ExpiryGranularity) — shorter than the lease's TTL if need
//     be, since the lease is over. While nested holds of the owner remain
//     the expiry is never shortened, and the last one's Release leaves the
//     item until the mark's moment instead of deleting it. The owner may
//     nest into a lingering lock (as on mem://); another owner waits for it.
//   - Refresh: gets, check owner, nonce and hold, then cas with expiry
//     max(remaining, ttl): two round trips per lock. Touch is never used:
//     it would extend anyone's lock.
//   - Automatic refresh is batched (the driver implements
//     backend.BatchRefresher): distlock's scheduler hands it up to 128 due
//     leases at once, and where the Locker knows which server holds each
//     key (the URL opener, or WithSelector) a batch costs two round trips
//     per server on one connection, whatever its size — one
//     "gets k1 k2 …", then every cas pipelined in one write — with exactly
//     the checks and outcomes of Refresh. Nested holds of one owner are
//     extended by one cas; a cas that finds the item changed since the
//     gets (a concurrent nested acquire or release), or a reply the
//     pipeline cannot place, is settled by that lock's own Refresh; after
//     an I/O error the server's part of the batch is tried once more on a
//     fresh connection. Without a selector the batch reads with one
//     GetMulti (a request per server) and writes a cas per lock.
//     Measured on a 2-core machine with two local servers: 100,000 leases
//     at TTL 3 s (about 100,000 refreshes a second) held for 15 s without
//     a loss, at 0.03 requests per refresh (one-by-one refresh needs 2).
//   - Natural batching: where the Locker knows which server holds each
//     key (the URL opener, or WithSelector), the requests of acquire,
//     release and refresh (add, gets, cas, md) go through one connection
//     per server: while one exchange is in flight, the requests of other
//     goroutines queue, and the moment it is answered they go out
//     together in one write (at most 512), their replies read in order. A
//     lone request is sent at once, never delayed. A request whose context
//     ends while it is queued is never sent; one already sent is read to
//     its end in the background and, if it was an acquisition, undone as
//     below. Each request keeps its own outcome: after an I/O error the
//     requests whose replies were not read are of unknown outcome, exactly
//     as a lone request's. Measured on a 2-core machine (memcached/
//     BenchmarkNaturalBatching): 64 goroutines cycling TryAcquire+Release
//     over distinct keys on one Locker ran 2.6–2.8 times as many cycles a
//     second (blocks alternating with an unbatched Locker), at 0.1–0.15
//     writes per cycle instead of 3 and no dials (gomemcache dialled a
//     connection every 10–20 cycles beyond its 16 idle ones); a lone
//     goroutine ran as fast (1.03–1.08×). Without a selector the
//     requests go through gomemcache, a connection per concurrent request.
//
// Waiting polls: distlock's Acquire retries with jittered, capped backoff,
// never sleeping past the holder's recorded expiry.
//
// # Inspection and forced release
//
// Locker.Inspect reads the item from any client: Owner, Metadata and
// Holds (the live hold ids) from its value; TTL the time left before the
// server drops it. Where the Locker knows the key's server (the URL opener,
// or WithSelector) and the server speaks the meta protocol, that is the
// server's own count, read with the value and its CAS in one
// "mg <key> t v c" on the Locker's own connection to the server the
// client's selector picks (dialled within the client's timeout and the
// call's ctx): whole seconds, including the extra second every expiry
// carries (a lock taken with TTL 10 s shows 11 s at first). Otherwise
// (New without WithSelector, or a server without the meta protocol) TTL is
// the expiry its last writer recorded in the value, by that writer's wall
// clock, less this machine's: skew between the two machines shifts it, and
// a change of the item's expiry by another tool (touch) does not show.
// Token is always 0 (no fencing), Waiters -1: waiters poll, and the server
// knows nothing of them. A value under the key that distlock did not write
// is an error, for ForceRelease too, and is left alone.
//
// Locker.ForceRelease reads the item with its CAS value and deletes it
// only if that CAS value is still current: with "md <key> C<cas>" where the
// last Release would use it, else by cas to a tombstone that expires at
// once. If the item changed in between (a nested hold came or went, the
// holder released and another owner acquired), nothing is deleted and it
// is read again (at most 16 times), so the report is exactly the record
// deleted. Every hold goes with the item; the evicted holder's Refresh and
// Release find the item gone or another tenure's and get ErrNotHeld (its
// lease ends at its next automatic refresh, about ttl/3 later, not at
// once: memcached cannot tell it). The lock is free at once; waiters find
// it at their next poll. There is no fencing token to raise: a process
// still working under the evicted lease is not stopped by anything but its
// lease's Context.
//
// # TTL and validity
//
// memcached counts expiry in whole seconds on a clock that ticks once a
// second: an item stored with expiry n lives between n−1 and n seconds
// (measured: n = 1 lived 80–770 ms, n = 2 lived 1.07–2.0 s). Worse, each
// tick re-arms the next one second after itself, so the ticks drift later
// (1.5 to 2.6 ms per tick measured on a busy machine: a crossing every 6 to
// 11 minutes), and whenever their phase crosses a whole second memcached's
// clock jumps by two: every item alive at that moment loses one more second,
// living between n−2 and n−1 seconds (an item with expiry 2 stored just
// before a jump lived 11 ms). TTLs must therefore be whole seconds from MinTTL (2 s) to MaxTTL
// (30 days); anything else is ErrInvalidTTL, never rounded. Every expiry
// sent to memcached is the TTL plus one second, and a lease counts its
// validity as ttl − 1 s from the moment its request was sent: the lease
// reports its loss on Done no later than the server can drop the item by
// expiry, even across a clock jump. A crashed holder's lock is freed between
// ttl and ttl + 1 s after its last acquire or refresh (from ttl − 1 s at a
// clock jump). memcached reads an expiry above 30 days (2,592,000 s) as an
// absolute Unix time — 30 days and one second would expire at once — and
// converting needs the server's clock, so longer TTLs are refused; at
// exactly 30 days the extra second does not fit and the validity is
// ttl − 2 s. These bounds assume memcached's clock thread is not starved of
// CPU: a tick that runs late makes items stored meanwhile live that much
// less.
//
// The expiry recorded in the value is computed with the writer's wall
// clock; it serves the waiters' hint and the never-shorten rule between
// nested holds of one owner on different machines, so clock skew between
// those machines can shorten a sibling hold's server-side expiry by the
// skew. Validity itself uses only the local monotonic clock.
//
// # Capabilities
//
// Expiring and Reentrant — and only these:
//
//   - Not Fencing. memcached has no durable counter: CAS values restart at 1
//     after a restart, and incr counters can be evicted. Token is always 0,
//     so the guards of package fence refuse its leases (fence.ErrZeroToken):
//     a resource cannot be protected from a paused holder with it.
//   - Not Durable. memcached keeps nothing on disk. A restart or flush_all
//     drops every lock at once; another owner can then acquire a lock whose
//     holder still believes it holds it, until that holder's next refresh
//     (auto-refresh runs about every ttl/3) finds the item gone and ends its
//     lease with ErrLockLost. The Locker keeps working once the server is
//     back.
//   - Eviction. Under memory pressure memcached's LRU evicts items, live
//     locks included, silently; the same window as a restart follows. Run
//     memcached with -M (no eviction) for locks, ideally an instance of its
//     own. With -M a full slab class answers "SERVER_ERROR out of memory",
//     which this package reports as ErrUnavailable (never as "busy"): new
//     acquisitions fail, a held lock stays put, but its refreshes fail too
//     (cas needs a free chunk), so the lease ends at its validity deadline
//     while the item lives until its expiry — safe, not live. The meta
//     release needs no memory; the tombstone fallback does.
//   - Not Notify, not Fair: memcached cannot announce deletions; waiters
//     poll and whoever polls first after a release wins.
//   - Not SessionBound: items are not tied to connections; a dead holder's
//     lock is freed by its TTL.
//
// # Several servers
//
// With several servers each key lives on one of them, chosen by gomemcache's
// ServerList: CRC-32 of the item key modulo the number of servers, in the
// order listed. For a given list the same key always maps to the same
// server. A different list (a server added, removed or reordered) maps many
// keys to other servers, where their locks look free: a client using the
// new list can acquire a lock that a client using the old list holds, and
// the two never see each other. Every lock held under the old list is at
// risk, until it expires or is released; a server that goes down takes its
// locks with it (acquisitions of its keys fail with ErrUnavailable; they
// do not move elsewhere). There is no replication and no quorum.
//
// The server-list guard (WithPin, pin= in URLs; on by default where the
// Locker knows the selector) records the list on each server the first time
// a Locker takes a lock there, in an item "<prefix>servers" without expiry,
// and refuses with ErrInvalidOption to take locks on a server that records
// another list. Change the list only after every holder under the old one
// is gone, then open once with pin=reset. The guard is best effort: the
// record is lost with a restart, flush_all or eviction (prefer -M), and
// clients that reach the same server under different addresses (a name and
// an IP) count as different lists.
//
// # Errors and cancellation
//
// gomemcache takes no context. Each operation runs under the client's I/O
// timeout (the URL's timeout=, default 1 s; the client's Timeout for New)
// and returns as soon as its context ends; the request then finishes in the
// background within that timeout. An acquisition whose outcome is unknown —
// its context ended or its connection failed after the request was sent —
// is undone in the background: its unique hold is removed, owner-checked,
// as soon as the server answers, for at most the TTL. A release that cannot
// reach the server is retried the same way. An unreachable server, an I/O
// error or a SERVER_ERROR reply yields an error wrapping ErrUnavailable
// with gomemcache's error reachable through errors.As and errors.Is. The
// driver returns gomemcache's errors as they are and distlock wraps them
// once, by the driver's ErrorCode: a refused, reset or timed-out
// connection (connect timeouts included) and "Too many open connections"
// are transient outages, which distlock.WithRetryUnavailable waits out;
// "SERVER_ERROR out of memory" and other server errors are not.
//
// Without a selector (New without WithSelector), gomemcache opens one
// connection per concurrent request and keeps up to MaxIdleConns (the
// URL's max_idle=, default 16) of them idle per server; it has no upper
// bound. memcached refuses connections beyond its -c limit
// (default 1024) with "ERROR Too many open connections", which is reported
// as ErrUnavailable: size -c for the number of concurrent lock operations.
//
// (*distlock.Locker).As answers **memcache.Client and *Items, which names the memcached item of each lock key.
package memcached
