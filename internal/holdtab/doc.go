// Package holdtab is the local bookkeeping that the session-bound lock
// backends (zookeeper, etcd) share: a driver's table of the holds it has,
// keyed by lock name. A hold is one tenure on the server (a ZooKeeper
// node, an etcd key), shared by the nested acquisitions of its owner
// through one Handle each; when the tenure ends, the Lost callbacks of its
// handles are told. The backends keep their mechanism (server records,
// sessions, watches) and call the table for the rest.
//
// The table has no mutex of its own: it uses the driver's, given to New,
// which also guards the driver's sessions. Methods whose names end in
// Locked must be called with it held; the others take it. Guarantees:
//
//   - A key's state (Key) lives while an acquisition of it runs (Ref until
//     Unref) or a hold on it lives, and is then removed: the table does not
//     grow with the keys ever used.
//   - A key has at most one hold. GrantLocked installs a new one, returns the
//     one it replaced and closes the key's Changed channel, so waiters of
//     the same owner can join the new hold instead of queueing behind it.
//   - Nest adds a hold only to a live hold of the same owner, and reserves
//     it (Count) before it publishes the new count, so a concurrent last
//     release keeps the tenure.
//   - A hold ends once: the first of Gone and EndLocked marks it Lost,
//     removes it from its key and runs the backend's detach hook (with the
//     mutex held); the Lost callbacks of its handles then run, each once,
//     after the mutex is released — Gone skips the handle that found the
//     loss itself, which reports it through its own error.
//   - A release that keeps other holds (ReleaseKept) is reported lost only
//     if the tenure ended while holds on it remained: not when the
//     owner's own last release removed it meanwhile.
//   - A handle is released once (ReleaseLocked reports a second release),
//     and a released handle is never told of a loss.
//   - Publish calls of one hold run one at a time, and a call writes again
//     while the count changed under it (at most MaxPublishRounds writes),
//     so the last write carries the latest count.
package holdtab
