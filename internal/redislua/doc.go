// Package redislua holds the Redis side of distlock's Redis-based
// backends: the key layout, the Lua scripts, the per-node operations
// (acquire with reentrancy and fencing counter, owner-checked release and
// refresh, batched refresh over a pipeline, a fair queue), the
// classification of go-redis errors, and the owner-checked undo of
// operations whose outcome is unknown (on internal/async). The scripts are
// the .lua files under lua/, embedded (see Compose); the pub/sub wake-ups
// are package internal/redissub's.
//
// Every function works against one Redis node or one logical Redis (a
// go-redis Client, a Sentinel failover client, or a ClusterClient), so the
// single-Redis backend (package redis) calls them once and a Redlock backend
// calls them against each of its N independent masters. The functions
// return typed outcomes and the go-redis error unchanged; ErrorCode
// classifies the latter.
//
// # Data layout
//
// One lock named key lives under these names, all in one Redis Cluster
// slot (see KeysFor):
//
//	<prefix>{<tag>}        hash: o=owner, t=token, name=key, meta=the first
//	                       hold's metadata (absent when empty), one field
//	                       "h…" per hold (its value: the server time in ms
//	                       it was taken), w=1 once someone waits for it
//	<prefix>fence{<stag>}  integer: the fencing counter (INCR) of the lock
//	                       key's slot, shared by every lock in that slot;
//	                       never expires (FenceKey, SlotTag)
//	<prefix>{<tag>}:wake   pub/sub channel: a message when the lock is freed
//
// and, from the layout before per-slot counters, <prefix>{<tag>}:fence:
// the lock's own counter, which the next acquisition raises its token above
// and deletes (fence.lua). <stag> is a fixed 4-character tag per slot,
// computed once and the same in every process: at most
// 16,384 counters per prefix exist, and the tokens of one lock are strictly
// increasing but not consecutive.
//
// <tag> is the unpadded base64url SHA-256 digest of the key (43 bytes), so
// every key of 1 to 1024 bytes with any content, including '{', '}' and NUL,
// maps to fixed-length names and distinct keys stay distinct (a collision
// would need a SHA-256 collision).
//
// Each acquisition adds its own hold field (a unique id from HoldSource) to
// the hash. The hold count of a reentrant owner is the number of hold
// fields; the lock is freed (the hash deleted) when the last one is
// released. The freeing release publishes the wake-up only for a lock
// marked w: a busy attempt marks the lock it finds held (every waiter
// subscribes first and attempts again after each wake-up, so it marks each
// holder it waits for), and so do Watch (for the holder at the time) and
// Inspect (Election.Observe subscribes, then looks); a release nobody
// waits for costs no PUBLISH. A plain
// waiter not woken by a release (a Subscriber wakes one waiter per
// message) is handed the wake-up when the woken one leaves, and its retry
// marks the new holder. Because a hold id is unique per acquisition, an
// acquisition whose reply was lost can be recognised and undone exactly: a
// retry with the same hold id is idempotent, and Release with the owner and
// hold id (token 0) removes precisely that hold and nothing else.
//
// # Fair queue
//
// A fair lock adds two names to the layout (see Keys.Fair):
//
//	<prefix>{<tag>}:q  sorted set: the waiters' hold ids in arrival order
//	<prefix>{<tag>}:w  hash: per hold id "deadline seen attempt px len
//	                   owner metadata" (server microseconds; the attempt
//	                   number the waiter sent last; the TTL it asked for;
//	                   the owner's length); "#", the
//	                   arrival counter that orders the sorted set; and per
//	                   owner with queued waiters "c<owner>", their number
//
// A waiter enqueues with its first failed attempt and renews its entry with
// every attempt; an entry whose deadline passed (its waiter crashed, or was
// paused for longer than the queue TTL) is dropped when it reaches the head.
// A free lock goes to the first live waiter only: its own attempt takes it,
// and a release (or any attempt that finds the lock free while another
// waiter is at the head) grants it directly — the lock hash is written for
// that waiter, with its owner, a new token and its TTL, and the grant is
// published on the channel as
//
//	g<hold> <token> <attempt> <µs since that attempt was processed>
//
// so the waiter holds the lock without another round trip. It counts its
// validity from the time it sent that attempt plus the elapsed time (less
// 1% for clock-rate drift), a lower bound of the grant time in its own
// clock. A waiter that missed the message finds the grant with its next
// attempt (outcome Granted). Both queue keys expire twice the queue TTL
// after the last waiter renewed its entry.
//
// Reentrancy overrides the queue: whenever an owner comes to hold the lock
// (granted, or taken by its own attempt), every other live waiter of that
// owner still in the queue, wherever it stands, is given a hold of its own
// at once — the hold a TryAcquire of that owner would get — and its grant
// is published as above. The per-owner count spares the scan of the queue
// unless the owner has another waiter in it.
package redislua
