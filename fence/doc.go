// Package fence makes a paused lock holder harmless: it is the resource's
// half of fencing tokens.
//
// A lease can end without its holder knowing: a process paused (GC, SIGSTOP,
// a slow disk) past its TTL wakes up still believing it holds the lock,
// while another holder has acquired it and written. No lock service can
// prevent that write; only the resource can refuse it. Every distlock
// backend with Capabilities().Fencing gives each acquisition a token that is
// strictly greater than any earlier acquisition's of the same key
// (Lease.Token). The guards here pass the token along with each write and
// refuse a write whose token is lower than the highest the resource has
// already accepted:
//
//	SQL   NewSQLTable / NewSQLColumn, then Tx (database/sql), TxPgx (pgx), or
//	      Check / CheckPgx inside a transaction of your own
//	Redis NewRedis, then Set, HSet, or Eval with a NewScript
//	Files OpenDir, then WriteFile or Install
//
// Using the token is one call:
//
//	err := guard.Tx(ctx, db, "report", lease.Token(), func(tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, "UPDATE report SET body = $1 WHERE id = 1", body)
//		return err
//	})
//	if errors.Is(err, fence.ErrStale) { /* a newer holder has written: stop */ }
//
// What every guard guarantees: once a write with token T has been applied to
// a resource, no write with a token below T is applied to it; a refused
// write returns a *StaleError (errors.Is(err, ErrStale)) and changes nothing.
// A write with a token equal to the highest is allowed: tokens are unique per
// acquisition, so an equal token is the same lease writing again (several
// writes under one lease, or a retry after a lost reply); the token record
// does not change, so such a retry is idempotent as long as the write itself
// is.
//
// What no guard guarantees: that reads are fresh (a stale holder reads
// freely); anything outside the guarded store (e-mails sent, calls made,
// other databases); writes that bypass the guard; order between different
// resources, or between tokens of different lock keys (protect one resource
// with one lock key). A guard refuses token 0 with ErrZeroToken: backends
// without fencing (memcached, Redlock) give 0, and their writes cannot be
// ordered. If the lock backend forgets its counter (a Redis restarted
// without AOF), tokens start again from 1 and every write is refused until
// the resource's record is reset by hand: safe, but stuck.
//
// docs/FENCING.md walks through the scenario (a holder pauses past its
// lease, another acquires and writes, the first wakes and writes) with each
// guard, the DDL of both SQL shapes, and what S3 conditional writes would
// need for object storage.
package fence
