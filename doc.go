// Package distlock is a distributed lock with one API over pluggable
// backends: Redis, Redlock, ZooKeeper, etcd, memcached, MySQL/MariaDB,
// PostgreSQL, lock files in a local directory and an in-process reference
// backend (packages redis, redlock, zookeeper, etcd, memcached, mysql,
// postgres, file and memory).
//
// A Locker hands out Leases. A Lease is one held lock: it carries a fencing
// token, can be refreshed and released (both owner-checked, so they never
// touch a lock that another owner holds now), is refreshed automatically by
// default, and reports its end on Done and Context — no later than the
// moment another owner could acquire the lock, because distlock keeps a local
// validity deadline measured on the monotonic clock from the moment each
// request was sent.
//
// Open a Locker by URL after importing the backend package for its side
// effect, as with database/sql:
//
//	import _ "github.com/distlock/distlock/memory"
//
//	locker, err := distlock.Open(ctx, "mem://")
//	...
//	err = locker.Do(ctx, "invoice:42", func(ctx context.Context) error {
//		return work(ctx) // ctx ends if the lock is lost
//	})
//
// Each backend package also has a constructor over an existing client,
// New(client, ...Option) (*Locker, error). A Locker is one concrete type on
// every backend; a backend's extras (its client, a session, a mode) are
// reached with Locker.As.
//
// A Lease cannot stop a write its holder already issued before a pause
// past its validity: a fencing token, checked by the resource (package
// fence), makes such a write harmless. Locker.Capabilities says which
// guarantees a backend gives (fencing, reentrancy, notification, fairness,
// session binding, expiry, durability); each backend's package doc says
// what it does not guarantee, and docs/backends has the detail.
//
// Beyond single locks, a Locker gives multi-key locks taken in one order
// (AcquireAll), counting semaphores (Semaphore), leader election
// (NewElection) and operator calls (Inspect, ForceRelease). Package
// conformance proves each backend's claims; package backend is the driver
// interface for backend authors.
package distlock
