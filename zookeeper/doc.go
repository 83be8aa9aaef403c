// Package zookeeper is distlock's ZooKeeper backend: the official lock
// recipe (ephemeral-sequential nodes, the lowest holds, each waiter watches
// only the next-lower node), made as robust as Apache Curator's
// InterProcessMutex, on github.com/go-zookeeper/zk.
//
// Open it by URL after importing the package:
//
//	zookeeper://h1:2181,h2:2181,h3:2181/base/path?session_timeout=10s
//
// (scheme zk:// too; port 2181 by default; base path /distlock by default).
// Parameters: session_timeout (asked of the server, default 10s),
// session_margin (default a tenth of the negotiated timeout), loss_policy
// (session_timeout or disconnect), connect_timeout (how long an
// acquisition waits for a session, default the session timeout; about a
// second when every server address refuses connections) and log
// (true: go-zookeeper's error log to the standard logger). Unknown
// parameters, credentials in the URL and paths the server would reject are
// ErrInvalidOption. Dial is the typed equivalent; New wraps a *zk.Conn of
// your own (made by Connect, or give WithSessionTimeout).
//
// # Mechanism
//
// Each key has a container node under the base path, named "k-" followed
// by the key with every byte other than A–Z a–z 0–9 - . _ ~ written %XX:
// any key of 1 to 1024 bytes (with "/", "..", control characters, emoji or
// private-use code points, which the server refuses in paths) becomes one
// printable-ASCII component, and distinct keys stay distinct. Containers
// are deleted by the server once empty, so idle keys leave nothing behind;
// a create under a parent reaped in between is retried.
//
// An acquisition creates "_c_<guid>-lock-" with the ephemeral and sequence
// flags, a fresh random GUID per attempt
// (Curator's protected mode), and as data the JSON
// {"v":1,"owner":…,"metadata":…,"holds":1} (owner id, WithMetadata, nested
// holds; readable with zkCli's get). It lists the children without a watch and
// holds the lock if its node is the first lock node, ordering sequence
// numbers as serial numbers so that the order survives the wrap of the
// server's signed 32-bit counter (2147483647 is followed by -2147483648);
// other children are ignored. Otherwise TryAcquire deletes its node and
// reports the lock busy, and Acquire watches only the next-lower node with
// exists(): one release wakes one waiter (no herd effect), and waiters are
// served in arrival order. Release deletes the node; its path is unique
// to the acquisition, so it can never delete another owner's lock. A
// cancelled or timed-out Acquire deletes its node before returning.
//
// If the connection drops after a create was sent, its outcome is unknown:
// the children are listed again (after a Sync) and the node carrying the
// attempt's GUID is adopted if its ephemeralOwner is the current session
// (CURATOR-498). If that cannot be learnt in time, the node is deleted in
// the background until that succeeds or its session ends; a second node of
// the same attempt found later is deleted too. This is the orphan that
// go-zookeeper's own zk.Lock leaves (samuel/go-zookeeper#229), which blocks
// every other client for as long as the session lives.
//
// The fencing token is the lock node's czxid, the zxid of the transaction
// that created it: strictly increasing across the whole ensemble, hence
// across holders, sessions, parent re-creation and restarts.
//
// # Sessions and loss
//
// A lock lives as long as the session that created its node. WithTTL is
// validated and otherwise ignored: the session timeout plays its role. A
// holder that dies or is cut off frees its locks when the server expires
// its session, the negotiated timeout after the server last heard from it;
// a live holder keeps its locks for as long as its session lives, whatever
// its TTL, and there is nothing to refresh (Lease.Refresh checks that the
// node still exists in the session).
//
// The server clamps the requested timeout (to 2–20 × tickTime by default):
// the negotiated value is read from the connect handshake on the wire,
// since go-zookeeper keeps it private. Loss detection does not use
// go-zookeeper's event channel (small, and it drops events). The driver
// keeps, per session, the last moment the ensemble certainly heard from it:
// the send time of the latest answered Sync (sent every tenth of the
// timeout while the session holds or waits for a lock; a Sync goes through
// the leader) or connect handshake. At last contact + negotiated timeout −
// margin, every lease of the session ends with ErrLockLost, before the
// server can expire the session and grant the lock to another client, and
// without waiting for a reconnect to report the expiry. The same happens at
// once when the server reports the session expired, or go-zookeeper moves
// to another session. A disconnect shorter than that keeps the leases
// (LoseOnSessionTimeout, Curator's SessionConnectionStateErrorPolicy);
// LoseOnDisconnect (Curator's standard policy) ends them as soon as the
// connection drops. Under LoseOnSessionTimeout a short disconnect also
// keeps each waiting acquisition's node, hence its place in line: the
// requests of an acquisition that can safely be sent again (reads,
// watches, Syncs, deletes of its own node) are sent again on the same
// session, and a create whose answer was lost is recognised by its GUID.
//
// After a loss, later acquisitions use a new session: a Locker from Dial or
// a URL closes its connection (once it is back, if it comes back within
// the session timeout, which ends the session and deletes its nodes at
// once) and opens a new one; on a caller's connection go-zookeeper's
// reconnect opens the new session, and the nodes of a lost session that is
// in fact still alive are deleted in the background. Acquisitions waiting
// when their session is lost start over on the new session (losing their
// place in line).
//
// # Capabilities
//
// Fencing (czxid), Reentrant, Notify (exists watch on the predecessor),
// Fair (sequence order), SessionBound (ephemeral nodes) and Durable
// (ZooKeeper persists nodes and sessions: a restart of the whole ensemble
// keeps both, if the ensemble serves again before the holder's local
// deadline — the session timeout less the margin and up to one heartbeat
// period).
//
// Reentrancy is per Locker, that is per session: acquisitions of a key
// with the same WithOwner id on one Locker nest on one node (also one that
// was already queued when the first was granted) and return its token. The
// owner id is stored in the node, but the same id on another Locker is an
// ordinary competitor: that session can be lost independently of this one,
// so its node cannot stand for this Locker's hold. Each nested acquisition
// and each nested release rewrites the node's data with the new hold count
// (the same single request that checks the node still exists); the next
// waiter's watch fires on that change and is set again, without listing
// the queue.
//
// # Inspection and forced release
//
// distlock.Inspect, from any client, reads the key's queue (after a Sync,
// so that it is as recent as the leader) and its first lock node, the
// holder: Owner, Metadata (the first acquisition's) and Holds from the
// node's data, Token its czxid, SessionBound true with TTL 0, and Waiters
// the other lock nodes in the queue (nodes of the holder's own attempt, a
// protected create's duplicate, are not counted). Holds is the count the
// holding Locker last wrote: a nested acquisition or release whose ctx
// ended before its write was answered may show a moment later, and a
// holder of an earlier version of this package (its data was the bare
// owner id) shows as one hold without metadata. What Inspect cannot show:
// a session's liveness (a holder whose session the server has not yet
// expired shows as the holder), and nodes written by other lock recipes
// (foreign children are ignored).
//
// distlock.ForceRelease deletes the holder's node at the data version it
// read: if the node changed in between (a nested hold came or went) or was
// deleted (a release, and maybe a new holder), the delete fails and the
// queue is read again (at most 10 rounds), so the reported holder, its
// hold count and metadata are exactly those of the node deleted. Every
// nested hold goes with the node. The next node in line is woken by its
// watch as on a Release, and its token, the czxid of a node created later,
// is higher. The evicted Locker watches its own node (the watch set with
// the node's first read): the deletion ends its leases at once with
// ErrLockLost (Request.Lost), and their Refresh and Release get ErrNotHeld.
// Duplicates of the holder's attempt are deleted too.
//
// Parents do not pile up: per-key parents are container nodes, which the
// server deletes once empty (every znode.container.checkIntervalMs, 60 s by
// default); of 200 distinct keys locked and released one after another,
// 165 parents were still there right after the last release and none
// 1.0 s later (TestDistinctKeysLeaveNoParents, with a 300 ms interval).
//
// # Not claimed
//
// Expiring: locks do not expire on a TTL (see above). Also:
//
//   - A lock node deleted by a third party (ForceRelease, or by hand) is
//     reported on Done through the holder's watch on its node, as soon as
//     the watch fires; if the watch could not be set again (a connection
//     problem at that moment), the holder learns of it at its next
//     Refresh, Release (ErrNotHeld) or nested acquisition. Waiters proceed
//     at once.
//   - A paused holder process (SIGSTOP, a long GC pause) keeps its
//     connection open; its session expires after the timeout and another
//     client takes the lock. The local deadline runs on the monotonic
//     clock, so the loss is declared as soon as the process runs again,
//     but a check of Lease.Err in that same instant can race with it: pass
//     the fencing token to the resource you protect.
//   - Contact is measured on the ensemble's side of the link: a server cut
//     off from the leader keeps answering pings (not Syncs) for up to
//     syncLimit × tickTime, and the leader learns of a client's activity
//     about one tickTime late. The default margin (a tenth of the timeout)
//     assumes tickTime well below it; raise WithSessionMargin otherwise.
//   - Waiters that lose their session, and queued reentrant acquisitions
//     of a holder's owner, do not keep FIFO order.
//   - The URL form cannot carry credentials: authenticate a *zk.Conn and
//     use New (with WithACL for the nodes' ACL).
package zookeeper
