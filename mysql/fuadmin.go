package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/sqllock"
)

// Forupdate mode's operator calls (backend.Inspector,
// backend.ForceReleaser). The lock is InnoDB's row lock on the key's kind-0
// row; the statement that issues the token (while the row lock is held)
// records in the key's fence row (kind 1) the holder's owner, metadata,
// nested holds and connection id.
//
// InnoDB's information_schema tables of transactions and lock waits are
// served from a cache that is refreshed only once it has been left unread
// for 0.1s (so clients polling faster than that see it frozen): Inspect
// does not use them, and ForceRelease reads them only after a pause.

var (
	_ backend.Inspector               = (*fuDriver)(nil)
	_ backend.ForceReleaser           = (*fuDriver)(nil)
	_ sqllock.HoldRecorder[*sql.Conn] = (*fuDriver)(nil)
)

const (
	// Arguments: hash.
	fuRecordSQL = `SELECT owner, metadata, fence, holds, conn_id FROM %[1]s WHERE key_hash = ? AND kind = 1 AND conn_id IS NOT NULL`
	// Arguments: delta, hash, fence, conn id.
	fuHoldsSQL = `UPDATE %[1]s SET holds = holds + ? WHERE key_hash = ? AND kind = 1 AND fence = ? AND conn_id = ?`
	// fuBlockersSQL lists the connections of the running (not waiting)
	// transactions that block the lock request of a connection.
	// Arguments: conn id.
	fuBlockersSQL = `SELECT b.trx_mysql_thread_id FROM information_schema.INNODB_LOCK_WAITS w
JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id
JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id
WHERE r.trx_mysql_thread_id = ? AND b.trx_state = 'RUNNING'`
	// fuAliveSQL reports whether a connection still exists (the
	// process list is not cached). Arguments: conn id.
	fuAliveSQL = `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?`
	// trxCacheIdle is longer than InnoDB's information_schema cache
	// needs to be left unread before it is refreshed.
	trxCacheIdle = 150 * time.Millisecond
	// forceAttempts bounds ForceRelease's attempts while the lock changes
	// hands.
	forceAttempts = 10
)

// RecordHolds implements sqllock.HoldRecorder: the record is current
// while it names p's fence and connection.
func (d *fuDriver) RecordHolds(ctx context.Context, key string, p sqllock.Pinned[*sql.Conn], delta int) (bool, error) {
	h := keyHash(key)
	res, err := d.db.ExecContext(ctx, fmt.Sprintf(fuHoldsSQL, d.Table), delta, h[:], p.Token, p.ID)
	if err != nil {
		return false, sqllock.Failed(ctx, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, sqllock.Failed(ctx, err)
	}
	return n == 1, nil
}

// holderRecord is a fence row's holder record as fuRecordSQL reads it.
type holderRecord struct {
	Owner    []byte        `db:"owner"`
	Metadata []byte        `db:"metadata"`
	Fence    uint64        `db:"fence"`
	Holds    sql.NullInt64 `db:"holds"`
	ConnID   int64         `db:"conn_id"`
}

// record reads key's holder record (as Held; found false if none).
func (d *fuDriver) record(ctx context.Context, h [32]byte) (info backend.LockInfo, connID int64, found bool, err error) {
	var r holderRecord
	err = sqlx.GetContext(ctx, d.x, &r, fmt.Sprintf(fuRecordSQL, d.Table), h[:])
	if errors.Is(err, sql.ErrNoRows) {
		return backend.LockInfo{Waiters: -1}, 0, false, nil
	}
	if err != nil {
		return backend.LockInfo{}, 0, false, sqllock.Failed(ctx, err)
	}
	return backend.LockInfo{Held: true, Owner: string(r.Owner), Metadata: string(r.Metadata), Token: r.Fence,
		Holds: int(r.Holds.Int64), SessionBound: true, Waiters: -1}, r.ConnID, true, nil
}

// probe reports whether the key's row is locked: a locking read NOWAIT in a
// transaction rolled back at once. When the row is free, it holds it for
// that instant.
func (d *fuDriver) probe(ctx context.Context, h [32]byte) (bool, error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return false, sqllock.Failed(ctx, err)
	}
	a := &fuAttempt{d: d, conn: conn, clean: true}
	_, err = a.lockRow(ctx, h, false)
	if errors.Is(err, backend.ErrNotAcquired) {
		return true, a.fail(nil)
	}
	if err != nil {
		return false, a.fail(err)
	}
	if !a.clean && rollback(ctx, conn) == nil {
		a.clean = true
	}
	return false, a.fail(nil)
}

// Inspect implements backend.Inspector: a locking read NOWAIT, rolled back
// at once, tells whether the row is locked (when it is free, it is taken
// for that instant: a TryAcquire at the same moment may find it busy); the
// holder is the one recorded with the last token. A holder whose grant has
// not yet recorded its token (the grant's next round trip) is shown with
// the previous holder's record. Waiters is -1: InnoDB's lock-wait table is
// not reliable for polling (see above).
func (d *fuDriver) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	if err := d.ready(ctx); err != nil {
		return backend.LockInfo{}, err
	}
	h := keyHash(key)
	busy, err := d.probe(ctx, h)
	if err != nil || !busy {
		return backend.LockInfo{Waiters: -1}, err
	}
	info, _, _, err := d.record(ctx, h)
	return info, err
}

// ForceRelease implements backend.ForceReleaser: it ends the holder's
// connection with KILL CONNECTION, once InnoDB's lock waits show that
// connection's transaction holding the row, and returns once it is gone
// and the lock free. It needs the same user or CONNECTION ADMIN.
func (d *fuDriver) ForceRelease(ctx context.Context, key string, want backend.Holder) (backend.LockInfo, error) {
	if err := d.ready(ctx); err != nil {
		return backend.LockInfo{}, err
	}
	h := keyHash(key)
	for range forceAttempts {
		info, again, err := d.forceOnce(ctx, h, want)
		if err != nil || !again {
			return info, err
		}
	}
	return backend.LockInfo{}, fmt.Errorf("%w: the lock of %q changed hands %d times while it was being released", backend.ErrUnavailable, key, forceAttempts)
}

// forceOnce is one attempt of ForceRelease; again reports that the
// recorded connection did not hold the lock (a new holder is recording
// itself).
func (d *fuDriver) forceOnce(ctx context.Context, h [32]byte, want backend.Holder) (info backend.LockInfo, again bool, err error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return backend.LockInfo{}, false, sqllock.Failed(ctx, err)
	}
	defer discard(conn) // its state is unknown after a stopped wait
	var me int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&me); err != nil {
		return backend.LockInfo{}, false, sqllock.Failed(ctx, err)
	}
	if _, err := conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
		return backend.LockInfo{}, false, sqllock.Failed(ctx, err)
	}
	// Queue for the row lock (or take it at once: then it is free).
	wctx, stopWait := context.WithCancel(ctx)
	defer stopWait()
	waited := make(chan struct{})
	var waitErr error
	go func() {
		defer close(waited)
		_, waitErr = d.killable(wctx, me, 0, func(qctx context.Context) error {
			_, _, err := lockRead(qctx, conn, d.qWait, h)
			return err
		})
	}()
	finish := func() {
		stopWait()
		<-waited
		rctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		_ = rollback(rctx, conn)
		cancel()
	}
	defer finish()
	if err := sleep(ctx, trxCacheIdle); err != nil {
		return backend.LockInfo{}, false, err
	}
	select {
	case <-waited:
		if waitErr != nil {
			return backend.LockInfo{}, false, sqllock.Failed(ctx, waitErr)
		}
		if want != (backend.Holder{}) {
			return backend.LockInfo{}, false, want.Refusal()
		}
		return backend.LockInfo{Waiters: -1}, false, nil // free (or no row: never locked)
	default:
	}
	info, holder, found, err := d.record(ctx, h)
	if err != nil || !found {
		return backend.LockInfo{}, found || err == nil, err
	}
	if !want.Matches(info) {
		// The record names another holder than want; the holder it names
		// is proved below before anything is killed.
		return backend.LockInfo{}, false, want.Refusal()
	}
	blocked, err := d.blocks(ctx, me, holder)
	if err != nil || !blocked {
		return backend.LockInfo{}, err == nil, err
	}
	if _, err := d.db.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(holder, 10)); err != nil && mysqlCode(err) != erNoSuchThread {
		return backend.LockInfo{}, false, sqllock.Failed(ctx, err)
	}
	// The lock is free once the killed connection has rolled back and
	// gone.
	for i := 0; ; i++ {
		var n int
		if err := d.db.QueryRowContext(ctx, fuAliveSQL, holder).Scan(&n); err != nil {
			return backend.LockInfo{}, false, sqllock.Failed(ctx, err)
		}
		if n == 0 {
			return info, false, nil
		}
		if i == 1000 {
			return backend.LockInfo{}, false, fmt.Errorf("%w: the killed holder's connection %d is still there after 10s", backend.ErrUnavailable, holder)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return backend.LockInfo{}, false, err
		}
	}
}

// blocks reports whether connection holder's running transaction blocks
// the lock request of connection me.
func (d *fuDriver) blocks(ctx context.Context, me, holder int64) (bool, error) {
	var blockers []int64
	if err := sqlx.SelectContext(ctx, d.x, &blockers, fuBlockersSQL, me); err != nil {
		return false, sqllock.Failed(ctx, err)
	}
	return slices.Contains(blockers, holder), nil
}

// sleep waits d or until ctx ends (NoAnswer).
func sleep(ctx context.Context, d time.Duration) error {
	if async.Sleep(ctx, d) != nil {
		return sqllock.NoAnswer(ctx, nil)
	}
	return nil
}

// erNoSuchThread: KILL of a connection that has already gone.
const erNoSuchThread = 1094
