// Package zookeeper is distlock's ZooKeeper backend: the official lock
// recipe (ephemeral-sequential nodes; the lowest holds; each waiter
// watches only the next-lower node), on github.com/go-zookeeper/zk. It
// registers the URL schemes "zookeeper" and "zk".
//
//	import _ "github.com/distlock/distlock/zookeeper"
//
//	l, err := distlock.Open(ctx, "zookeeper://h1:2181,h2:2181,h3:2181/base/path?session_timeout=10s")
//
// Dial is the typed equivalent; New wraps a *zk.Conn of your own.
//
// # Guarantees
//
// Each key has a container node under the base path (/distlock by
// default); any key of 1 to 1024 bytes maps to one distinct node name.
// An acquisition creates an ephemeral-sequential lock node and holds the
// lock when its node is the first. Waiters are served in arrival order,
// and one release wakes one waiter. Release deletes the acquisition's own
// node, so it never deletes another owner's lock. A cancelled Acquire
// deletes its node before returning; a create whose answer was lost is
// recognised by its random GUID, adopted or deleted, and never left to
// block others.
//
// The fencing token is the lock node's czxid: strictly increasing across
// holders, sessions and restarts of the ensemble.
//
// A lock lives as long as the session that created it: WithTTL is
// validated and otherwise ignored, and there is nothing to refresh. The
// Locker ends every lease of a session with ErrLockLost before the server
// can expire that session: at last contact + negotiated timeout − margin
// (WithSessionMargin, default a tenth of the timeout). With
// LoseOnSessionTimeout (the default) a shorter disconnect keeps leases
// and waiters' places in line; LoseOnDisconnect ends leases as soon as the
// connection drops. After a loss, later acquisitions use a new session.
//
// Capabilities: Fencing, Reentrant (per Locker), Notify, Fair,
// SessionBound, Durable.
//
// Locker.Inspect reads the holder's node after a Sync: owner, metadata,
// holds, token and the number of waiters. Locker.ForceRelease deletes the
// holder's node at the version it read, so the reported holder is exactly
// the one evicted; the evicted Locker's leases end with ErrLockLost.
//
// # Not guaranteed
//
//   - Expiring: locks do not expire on a TTL.
//   - A paused holder process keeps its lock until its session expires;
//     its loss is declared as soon as it runs again. Pass the fencing
//     token to the resource you protect.
//   - Contact is measured on the ensemble's side: a server cut off from the
//     leader may keep answering pings for up to syncLimit × tickTime. Raise
//     WithSessionMargin when tickTime is not far below a tenth of the
//     session timeout.
//   - Waiters that lose their session lose their place in line.
//   - The URL form carries no credentials: authenticate a *zk.Conn and use
//     New (with WithACL for the nodes' ACL).
//
// URL parameters: session_timeout (default 10s), session_margin,
// loss_policy (session_timeout or disconnect), connect_timeout (how long
// an acquisition waits for a session; about a second when every server
// address refuses connections: ErrUnavailable naming each dial error) and
// log.
// Unknown parameters and paths the server would reject are
// ErrInvalidOption.
//
// (*distlock.Locker).As answers *Session: the current session's ID and
// negotiated Timeout.
//
// The mechanism, session and loss handling, and the operational limits are
// in docs/backends/zookeeper.md.
package zookeeper
