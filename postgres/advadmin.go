package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/sqllock"
)

// Advisory mode's operator calls (backend.Inspector,
// backend.ForceReleaser). The lock itself is the server's (pg_locks); the
// holder's owner, metadata, token, nested holds and backend pid are
// recorded in the key's row of the advisory table by the statement that
// takes the lock, so another client can read them.

var (
	_ backend.Inspector              = (*advDriver)(nil)
	_ backend.ForceReleaser          = (*advDriver)(nil)
	_ sqllock.HoldRecorder[*advConn] = (*advDriver)(nil)
)

// advLockMatch matches the pg_locks entries of the advisory lock $1 (a
// bigint: classid the high half, objid the low half, objsubid 1) in this
// database.
const advLockMatch = `l.locktype = 'advisory' AND l.objsubid = 1
  AND l.classid::bigint = (a.lock_id >> 32) & 4294967295 AND l.objid::bigint = a.lock_id & 4294967295
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`

const (
	// advInspectSQL reads the key's record, the backend pid holding its
	// lock (NULL if none) and the sessions waiting for it. Arguments: key.
	advInspectSQL = `SELECT a.owner, a.metadata, a.fence, a.holds, a.pid,
  (SELECT l.pid FROM pg_locks l WHERE ` + advLockMatch + ` AND l.granted LIMIT 1),
  (SELECT count(*) FROM pg_locks l WHERE ` + advLockMatch + ` AND NOT l.granted)
FROM %[1]s a WHERE a.lock_key = $1`

	// advRecordLockSQL locks the key's record (so no grant can record
	// itself meanwhile). Arguments: key.
	advRecordLockSQL = `SELECT a.owner, a.metadata, a.fence, a.holds, a.pid, a.lock_id FROM %[1]s a WHERE a.lock_key = $1 FOR UPDATE`

	// advTerminateSQL ends the session holding the lock if, and only if,
	// it is the recorded holder: the check and the signal are one
	// statement. pg_terminate_backend waits (up to 5s) for the session to
	// exit, which frees its locks. Returns (terminated, another pid holds
	// it). Arguments: lock id, recorded pid.
	advTerminateSQL = `SELECT
  COALESCE((SELECT pg_terminate_backend(l.pid, 5000) FROM pg_locks l, (SELECT $1::bigint AS lock_id) a
    WHERE ` + advLockMatch + ` AND l.granted AND l.pid = $2 LIMIT 1), false),
  EXISTS (SELECT 1 FROM pg_locks l, (SELECT $1::bigint AS lock_id) a WHERE ` + advLockMatch + ` AND l.granted AND l.pid <> $2)`

	// advHoldsSQL adds to the recorded nested holds of a tenure (fence
	// and session). Arguments: lock id, fence, delta, backend pid.
	advHoldsSQL = `UPDATE %[1]s SET holds = holds + $3 WHERE lock_id = $1 AND fence = $2 AND pid = $4`
)

// forceAttempts bounds ForceRelease's attempts while the record is being
// replaced by a new holder's grant.
const forceAttempts = 20

// RecordHolds implements sqllock.HoldRecorder: the record is current
// while it names p's fence and session.
func (d *advDriver) RecordHolds(ctx context.Context, _ string, p sqllock.Pinned[*advConn], delta int) (bool, error) {
	tag, err := d.pool.Exec(ctx, fmt.Sprintf(advHoldsSQL, d.Table), p.Conn.id, int64(p.Token), delta, int32(p.Conn.pid))
	if err != nil {
		return false, failed(ctx, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Inspect implements backend.Inspector: the key's record and pg_locks, in
// one statement. The lock is held when a session holds it in pg_locks;
// the record describes that holder when its pid matches (a grant records
// itself in the statement that takes the lock, so they differ only for
// that statement's duration: Inspect reads again, a few times). Waiters
// are the sessions waiting for the lock in the server.
func (d *advDriver) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	if err := d.ready(ctx); err != nil {
		return backend.LockInfo{}, err
	}
	for try := 0; ; try++ {
		var (
			owner, md   []byte
			fence       int64
			holds, rpid *int32
			holder      *int32
			waiters     int
		)
		err := d.pool.QueryRow(ctx, fmt.Sprintf(advInspectSQL, d.Table), []byte(key)).Scan(&owner, &md, &fence, &holds, &rpid, &holder, &waiters)
		if errors.Is(err, pgx.ErrNoRows) {
			return backend.LockInfo{Waiters: 0}, nil // never locked
		}
		if err != nil {
			return backend.LockInfo{}, failed(ctx, err)
		}
		info := backend.LockInfo{SessionBound: true, Waiters: waiters}
		if holder == nil {
			return info, nil
		}
		info.Held = true
		if rpid != nil && *rpid == *holder || try >= forceAttempts {
			info.Owner, info.Metadata, info.Token = string(owner), string(md), uint64(fence)
			if holds != nil {
				info.Holds = int(*holds)
			}
			return info, nil
		}
		if err := async.Sleep(ctx, 5*time.Millisecond); err != nil {
			return backend.LockInfo{}, sqllock.NoAnswer(ctx, err)
		}
	}
}

// ForceRelease implements backend.ForceReleaser: it ends the session
// holding the lock with pg_terminate_backend (which needs the
// pg_signal_backend role, or superuser), and waits for it to exit, which
// frees the lock. It first locks the key's record, so no new grant can
// record itself meanwhile, and terminates the session only if pg_locks
// shows the recorded pid holding the lock, in the same statement — never
// another session that reuses the connection later. The evicted holder's
// keepalive or next Refresh finds its session gone (ErrLockLost); the next
// grant advances the recorded fence past the evicted token.
func (d *advDriver) ForceRelease(ctx context.Context, key string, want backend.Holder) (backend.LockInfo, error) {
	if err := d.ready(ctx); err != nil {
		return backend.LockInfo{}, err
	}
	for range forceAttempts {
		info, again, err := d.forceOnce(ctx, key, want)
		if err != nil || !again {
			return info, err
		}
		if err := async.Sleep(ctx, 5*time.Millisecond); err != nil {
			return backend.LockInfo{}, sqllock.NoAnswer(ctx, err)
		}
	}
	return backend.LockInfo{}, fmt.Errorf("%w: the lock of %q changed hands %d times while it was being released", backend.ErrUnavailable, key, forceAttempts)
}

// forceOnce is one attempt of ForceRelease; again reports that another
// session than the recorded one holds the lock (its grant is recording
// itself).
func (d *advDriver) forceOnce(ctx context.Context, key string, want backend.Holder) (info backend.LockInfo, again bool, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var (
			owner, md   []byte
			fence, id   int64
			holds, rpid *int32
		)
		err := tx.QueryRow(ctx, fmt.Sprintf(advRecordLockSQL, d.Table), []byte(key)).Scan(&owner, &md, &fence, &holds, &rpid, &id)
		if errors.Is(err, pgx.ErrNoRows) {
			if want != (backend.Holder{}) {
				return want.Refusal()
			}
			return nil
		}
		if err != nil {
			return err
		}
		// The record names the last holder, locked until the end of this
		// transaction; the terminate below acts only if that holder's
		// session holds the lock.
		if !want.Matches(backend.LockInfo{Held: rpid != nil, Owner: string(owner), Token: uint64(fence)}) {
			return want.Refusal()
		}
		var pid int32
		if rpid != nil {
			pid = *rpid
		}
		var terminated, other bool
		if err := tx.QueryRow(ctx, advTerminateSQL, id, pid).Scan(&terminated, &other); err != nil {
			return err
		}
		switch {
		case terminated:
			info = backend.LockInfo{Held: true, Owner: string(owner), Metadata: string(md), Token: uint64(fence), SessionBound: true, Waiters: -1}
			if holds != nil {
				info.Holds = int(*holds)
			}
		case other:
			again = true
		}
		return nil
	})
	if err != nil {
		return backend.LockInfo{}, false, failed(ctx, err)
	}
	return info, again, nil
}
