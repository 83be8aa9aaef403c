// Package sqllock holds what distlock's SQL backends (mysql, postgres)
// share, written once; each driver keeps only its SQL and its server's
// specifics:
//
//   - Config and Dialect: the option set both drivers accept (mode, table,
//     create table, keepalive, default acquisition options), checked when
//     the option is applied, so New and the URL opener fail the same way;
//     table names validated and quoted per dialect, DDL by mode.
//   - Base: the database's lifetime in a driver — background work (an
//     async.Group bounded by Close), the schema set up once, the undo of an
//     acquisition whose reply was lost, retried on a schedule.
//   - Table, Hold and Server: a lock held on a connection pinned to the
//     lease (MySQL's SELECT … FOR UPDATE in an open transaction,
//     PostgreSQL's session advisory lock): one entry per (key, owner)
//     shared by its nested holds (each joins only after the server
//     confirms the session still holds the lock), a keepalive bounded by
//     the server's idle limits, a local deadline (backend.Deadliner) that
//     reports the loss before the server can free the lock, and a
//     connection in an unknown state never returned to the pool.
//   - Stoppable: a statement that waits for a lock inside the server,
//     stopped from the server side when its ctx ends.
//   - Cleanup, StartCleanup, Bucket: the background deletion of free lease
//     rows, bounded (interval, batch, passes per run), with per-bucket
//     fence floors so tokens stay strictly increasing per key; the driver
//     writes the pass (its SQL and its argument why racing acquisitions
//     read the raised floor).
//   - Column, Upgrade: a mode's columns added after its first release,
//     added on first use when the Locker manages the schema, else refused
//     with the ALTER TABLE statement.
//   - HoldRecorder: a Server that records nested holds for operators, and
//     tells whether its record still names the joined tenure.
//   - Permits, PermitSQL, PermitTx: semaphores in a permit table named
//     after the lock table: an acquisition is one transaction that locks
//     the semaphore's own row, deletes its expired permits and counts the
//     live ones, then refuses (every permit held: Busy with the first
//     expiry; another count: *backend.PermitsError), keeping the deletion,
//     or raises the fence and inserts the permit; an acquisition whose
//     outcome is unknown is undone in the background; Refresh and Release
//     touch only an unexpired permit. The driver writes the statements.
//   - NetCode, NoAnswer, OpenError: the error shapes both drivers use in
//     their backend.ErrorClassifier.
package sqllock
