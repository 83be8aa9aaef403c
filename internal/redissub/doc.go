// Package redissub delivers the release wake-ups and fair-queue grants that
// the scripts of internal/redislua publish, to the waiters of one Redis
// client, over one shared pub/sub connection (Subscriber). The single-Redis
// backend has one Subscriber per Locker; a Redlock backend one per node,
// with its waiters ranked alike on every node (NextRank).
package redissub
