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
// # Layout and guarantees
//
// One lock is one hash, named from the base64url SHA-256 of its key (so any
// key of 1 to 1024 bytes, with any content, maps to a fixed-length name,
// and distinct keys stay distinct), with its wake-up channel and a fair
// queue's keys in the same Cluster slot (KeysFor). Fencing tokens come
// from one counter per slot, strictly increasing per lock, not
// consecutive. Each acquisition adds its own hold field, a unique id
// (HoldSource): an acquisition whose reply was lost is undone exactly by
// that id, and a retry with it is idempotent. The lock is freed when its
// last hold is released; the release publishes a wake-up only when a busy
// attempt, Watch or Inspect marked the lock. A fair lock's release grants
// the lock to the first live waiter inside the script and publishes the
// grant. The full layout and the fair queue's entries are described in
// docs/backends/redis.md ("Key layout").
package redislua
