// Package memcached is distlock's memcached backend, through
// github.com/bradfitz/gomemcache. It registers the URL scheme "memcached".
//
//	import _ "github.com/distlock/distlock/memcached"
//
//	l, err := distlock.Open(ctx, "memcached://h1:11211,h2:11211")
//
// New wraps an existing *memcache.Client.
//
// memcached is a cache, not a lock service: a lock can vanish before its
// TTL, and there are no fencing tokens. Use this backend where a lost lock
// costs duplicated work, not corrupted data.
//
// # Guarantees
//
// A lock is one item, keyed by the prefix and the SHA-256 of the lock's
// name, so any name of 1 to 1024 bytes is a legal memcached key. Acquire
// is an add, which only the first writer wins. Release and Refresh are
// owner-checked by compare-and-swap on owner, tenure and hold: a holder
// whose lock expired and was taken over never touches the new owner's
// item. Delete and touch are never used. Refresh never shortens the
// expiry.
//
// TTLs are whole seconds from MinTTL (2s) to MaxTTL (30 days); anything
// else is ErrInvalidTTL, never rounded. memcached's expiry clock ticks once
// a second and can jump, so every expiry sent is the TTL plus one second,
// and a lease's validity is ttl − 1s from the moment its request was sent.
// The lease reports its loss no later than the server can drop the item by
// expiry.
//
// An acquisition whose outcome is unknown (its context ended or its
// connection failed after the request was sent) is undone in the
// background. Every operation returns when its context ends. An
// unreachable server or a SERVER_ERROR reply is ErrUnavailable.
//
// Capabilities: Expiring, Reentrant.
//
// Locker.Inspect reads the item: owner, metadata, holds and the time left.
// Locker.ForceRelease deletes the item only if it is unchanged since it
// was read, so the report is exactly the record deleted; the evicted
// holder learns of it at its next refresh.
//
// # Not guaranteed
//
//   - Fencing: Token is always 0; the guards of package fence refuse it.
//   - Durability: a restart or flush_all drops every lock at once.
//   - Eviction: memcached's LRU evicts live locks silently. Run memcached
//     with -M, ideally an instance of its own.
//   - Notify, Fair: waiters poll; whoever polls first after a release wins.
//   - SessionBound: a dead holder's lock is freed by its TTL.
//   - Several servers: each key lives on one server, chosen from the
//     server list. Clients with different lists do not see each other's
//     locks. The server-list guard (WithPin, on by default where the Locker
//     knows the selector) refuses a different list on a server that
//     records one, as a best effort.
//
// With the URL opener or WithSelector, requests to one server share one
// connection and batch naturally, releases use memcached 1.6's meta
// delete with CAS, and automatic refreshes of many leases cost two round
// trips per server. Without a selector, gomemcache opens a connection per
// concurrent request.
//
// URL parameters: prefix, timeout, max_idle, release and pin.
//
// (*distlock.Locker).As answers **memcache.Client and *Items, which names
// the memcached item of each lock key.
//
// The mechanism, memcached's clock, eviction and server-list analysis,
// and measured costs are in docs/backends/memcached.md.
package memcached
