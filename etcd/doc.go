// Package etcd is distlock's etcd v3 backend: the lock recipe of etcd's own
// client/v3/concurrency.Mutex (a key per waiter under the lock's prefix,
// the lowest create revision holds, each waiter watches only its
// predecessor's deletion), with what that Mutex lacks: a loss signal on
// every lease (Done, Err, Context), reentrancy by owner id, a create that
// cannot leave an orphan, inspection and forced release. It uses
// go.etcd.io/etcd/client/v3 and is tested against etcd 3.4 (Debian's
// etcd-server) on single members and 3-member clusters.
//
// Open it by URL after importing the package:
//
//	etcd://[user:password@]h1:2379,h2:2379,h3:2379/prefix?session_ttl=10s
//	etcds://h1:2379/prefix?sslrootcert=ca.pem&sslcert=client.pem&sslkey=client-key.pem
//
// (port 2379 by default; prefix /distlock by default). Parameters:
// session_ttl (the lease TTL, whole seconds from 2s, default 10s),
// session_margin (default a tenth of the TTL), connect_timeout (how long an
// acquisition waits for a session lease, default the TTL), hold_watch
// (default true, see WithHoldWatch) and log (true: the etcd client's log to
// stderr). etcds:// connects with TLS, verifying the members' certificates
// against the system's roots or the CAs of sslrootcert, and presents the
// client certificate of sslcert and sslkey (both or neither; postgres://'s
// names); these parameters on etcd:// are refused. A user name and
// password authenticate with etcd's auth (WithAuth): Open then contacts the
// cluster, within the connect timeout, and refused credentials are
// ErrAuth (never ErrUnavailable: waiting does not cure them); no error
// shows the password.
// Unknown parameters, a user without a password, unreadable certificate
// files and prefixes ending in "/" are ErrInvalidOption. Dial is the typed
// equivalent; New wraps a *clientv3.Client of your own, which Close
// leaves open.
//
// A cluster of which no endpoint accepts connections fails acquisitions,
// Inspect and ForceRelease at once with an ErrUnavailable that names each
// endpoint's dial error (connection refused, timeout); with
// distlock.WithRetryUnavailable, Acquire waits such an outage out until
// its ctx ends.
//
// # Mechanism
//
// A Locker has one session: one etcd lease, granted on its first
// acquisition and shared by all its locks and waiter keys. An acquisition
// writes the waiter key
//
//	<prefix>/<key, url.PathEscape'd>/<lease id, hex>-<random attempt id>
//
// with the lease, in one transaction that writes only if the key does not
// exist yet and reads the first waiter of the lock. Escaping writes "/" and
// "%" in keys as %XX, so any key of 1 to 1024 bytes maps to one path
// component and no lock's prefix contains another's. The value is JSON:
// {"owner":…,"metadata":…,"holds":n}.
//
// If our key has the lowest create revision, we hold the lock; the fencing
// token is that create revision, the cluster's revision at the write,
// which is strictly increasing across every key of the cluster: across
// holders, sessions, restarts and leader changes. Otherwise TryAcquire
// deletes its key and reports the lock busy; Acquire reads, in one
// linearizable transaction, its predecessor (the key with the highest
// create revision below ours) and its own key, and watches only the
// predecessor's deletion from the revision after that read, so a deletion
// in between is not missed and one release wakes one waiter (no herd).
// When the predecessor goes it reads again (an earlier waiter may still be
// ahead). A watch whose start revision was compacted meanwhile reads
// again; so does one that the member cancels (no leader). Release deletes
// the key in a transaction compared on its create revision, so it can
// never delete another owner's key.
//
// The write transaction is idempotent (it puts only if the key does not
// exist, and the key's name is the attempt's own), so a send whose answer
// is lost — a timeout, a member paused or cut off, a leader change — is
// sent again, and a resend that finds the key adopts it. When the caller's
// ctx ends before an answer, the key is deleted in the background on a
// schedule (at once, then 0.1, 0.5, 2, 5 and 15 s later) that outlasts a
// request delayed in the network, until the session ends; an acquisition
// of this Locker that finds such an orphan ahead of it deletes it at once.
// A cancelled or timed-out Acquire deletes its key before returning.
//
// # Sessions, loss and failover time
//
// The Locker keeps its lease alive itself: one KeepAliveOnce every third of
// the TTL as etcd's client does (sooner after a failure), each waiting for
// its answer until the session deadline, with another sent alongside when
// none came within half that period (a member that does not answer is
// given up for another; a slow answer still counts), and records the
// send time of each one answered with a live lease. The session deadline is
// that last send time + TTL − margin, on the monotonic clock: the leader
// cannot expire the lease before it, since it renews the lease to a full
// TTL when it handles a keepalive sent after that moment. Lease.Deadline
// returns it (backend.Deadliner), so a holder resumed from a pause sees its
// loss at once. At the deadline, or at once when the cluster answers that
// the lease is gone (expired, or revoked by an operator), every lock of the
// session ends with ErrLockLost (Done closes, Context is cancelled), the
// lease is revoked in the background in case the cluster still has it,
// and later acquisitions get a new session. Waiters on a lost session start
// over on the new one, losing their place in line.
//
// WithTTL is validated and otherwise ignored: the session TTL plays its
// role, and there is nothing to refresh (Lease.Refresh checks, with a
// linearizable read, that the key still exists with its create revision). The session TTL is the failover
// time: a holder that dies or is cut off frees its locks when its lease
// expires, the TTL after the leader last renewed it. It must be well above
// etcd's election timeout (1 s by default; --election-timeout): a leader
// change takes about one election timeout, during which keepalives are not
// answered, and the new leader extends every lease by about that much when
// it takes over, so a leader change does not expire leases, but a TTL
// shorter than an election plus the margin can make a holder declare its
// own leases lost during one. The server refuses TTLs below 1.5 ×
// election timeout (it grants that minimum instead; the granted TTL is the
// one used, see SessionTTL). The default of 10 s survives several leader
// changes and frees a dead holder's locks within 10 s.
//
// # Capabilities
//
// Fencing (create revision), Reentrant, Notify (a watch on the
// predecessor), Fair (create-revision order), SessionBound (the lease) and
// Durable (etcd persists keys and leases in its Raft log: a restart of a
// member, or of the whole cluster with its data, keeps the lock, if the
// cluster serves again before the holder's session deadline).
//
// Reentrancy is per Locker, that is per session: acquisitions of a key with
// the same WithOwner id on one Locker nest on one key (also one that was
// already queued when the first was granted) and return its token. The same
// id on another Locker is an ordinary competitor. Each nested acquisition
// and release rewrites the key's value with the new hold count, in a
// transaction compared on its create revision that doubles as the check
// that the key still exists.
//
// # Inspection and forced release
//
// Locker.Inspect, from any client, reads the lock's first waiter key and
// the number of waiter keys in one linearizable transaction: Owner,
// Metadata and Holds from the value, Token the create revision,
// SessionBound true with TTL 0, Waiters the other waiter keys.
// Locker.ForceRelease deletes the holder's key in a transaction compared
// on the create and mod revisions it read (read again, at most 10 rounds,
// if the holder changed); the next waiter is woken by its watch and its
// token, the create revision of a later key, is higher. The evicted
// Locker watches its own held keys: the deletion ends their leases at once
// with ErrLockLost (Request.Lost), and their Refresh and Release get
// ErrNotHeld. It does so with one watch per Locker, over the deletions
// under its prefix, matched to its held locks by the waiter key's name and
// a revision after the key's create revision; when that watch's stream
// ends (compaction of its start revision, a member that cancels it or
// loses its leader), the Locker reads every held key again (a key missing,
// or created again by someone else, ends its lease) and watches from the
// revision after that read, so no deletion is missed.
//
// # Compared with concurrency.Mutex
//
// The recipe and the server-side cost are the same (one key and one watch
// per waiter, one lease per session). What differs: Mutex gives no signal
// when its session's lease is lost (etcd#6127) — Session.Done closes only
// after the client's keepalive stream has given up, which can be after
// another client took the lock; here Done closes at the local deadline,
// before the lease can expire on the server. Mutex has no reentrancy, and
// a Lock whose ctx ends while its put is in flight returns without
// deleting the key, which then blocks every other client until the session
// ends or the same session locks that key again.
//
// # Not claimed
//
// Expiring: locks do not expire on a TTL (see above). Also:
//
//   - A held key deleted by a third party (ForceRelease, by hand) is
//     reported on Done through the holder's watch, as soon as the watch
//     delivers the deletion (a member cut off from its leader delays it;
//     the watch is then set again through another member). The watch is
//     one per Locker while it holds locks, not one per held lock, but it
//     receives every deletion under the prefix, from every client;
//     WithHoldWatch(false) saves it, and the holder then learns of the
//     deletion at its next Refresh, Release or nested acquisition.
//     Waiters proceed at once.
//   - A paused holder process keeps its connection; its lease expires
//     after the TTL and another client takes the lock. The local deadline
//     reports the loss as soon as the process runs again, but a check of
//     Lease.Err in that same instant can race with it: pass the fencing
//     token to the resource you protect.
//   - A watch on a member that is paused (not crashed) stays silent until
//     the member resumes: a waiter connected to it is served when it does,
//     or when its session is lost and it starts over.
//   - The URL form carries a user name and password and the TLS files;
//     other client settings (a token, a dialer, unix sockets) need a
//     *clientv3.Client of your own and New.
//
// (*distlock.Locker).As answers *Session (the current session lease's LeaseID and TTL) and **clientv3.Client.
package etcd
