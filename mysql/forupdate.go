package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// The forupdate-mode statements. Row kind 0 is the row locked FOR UPDATE;
// row kind 1 holds the fence counter, advanced on another connection while
// the kind-0 row is locked (so the token is committed before it is used).
const (
	// The locking reads return the session's connection id (for the
	// holder record and KILL QUERY) at no extra round trip.
	fuLockNowaitSQL = `SELECT CONNECTION_ID() FROM %[1]s WHERE key_hash = ? AND kind = 0 FOR UPDATE NOWAIT`
	fuLockWaitSQL   = `SELECT CONNECTION_ID() FROM %[1]s WHERE key_hash = ? AND kind = 0 FOR UPDATE`
	fuCreateSQL     = `INSERT IGNORE INTO %[1]s (key_hash, kind, lock_key, fence) VALUES (?, 0, ?, 0)`
	// fuFenceSQL advances the fence and records the holder (owner,
	// metadata, one hold, connection id) for Inspect and ForceRelease,
	// and the grant time for the cleanup. A new fence row starts at its
	// bucket's floor + 1 (fucleanup.go); the floor is read with a shared
	// lock (a non-SELECT statement's reads lock under REPEATABLE READ), so
	// a cleanup raising it is waited for. Arguments: hash, key, floor
	// hash, owner, metadata, conn id, owner, metadata, conn id.
	fuFenceSQL = `INSERT INTO %[1]s (key_hash, kind, lock_key, fence, owner, metadata, holds, conn_id, granted_at)
VALUES (?, 1, ?, LAST_INSERT_ID(1 + IFNULL((SELECT f.fence FROM (SELECT fence FROM %[1]s WHERE key_hash = ? AND kind = 2) AS f), 0)), ?, ?, 1, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1), owner = ?, metadata = ?, holds = 1, conn_id = ?, granted_at = UTC_TIMESTAMP(6)`
)

const (
	// killTimeout bounds the KILL QUERY that stops a waiting statement.
	killTimeout = 2 * time.Second
	// killedGrace is how long the killed statement's reply may take after
	// the KILL before its connection is closed.
	killedGrace = 250 * time.Millisecond
	// cleanupTimeout bounds a ROLLBACK before a connection is discarded.
	cleanupTimeout = 2 * time.Second
	// createAttempts bounds the attempts to create a missing lock row
	// (each ends when the row exists; more are needed only if it is deleted
	// again meanwhile).
	createAttempts = 20
	// createBusyAfter is how long TryAcquire lets the INSERT that creates a
	// missing row wait: it waits only when another owner created and locked
	// the row in the meantime, and then the lock is busy.
	createBusyAfter = 500 * time.Millisecond
)

// fuDriver is forupdate mode: the SQL of a row lock held by a transaction
// on a pinned connection (sqllock.Server); the pinned-lock bookkeeping is
// its sqllock.Table.
type fuDriver struct {
	*base
	t       *sqllock.Table[*sql.Conn]
	qNowait string
	qWait   string
	qCreate string
	qFence  string

	noIdleTrx atomic.Bool // the server has no idle_*transaction_timeout (MySQL)
}

func newFUDriver(b *base, keepalive time.Duration) *fuDriver {
	d := &fuDriver{
		base:    b,
		qNowait: fmt.Sprintf(fuLockNowaitSQL, b.Table),
		qWait:   fmt.Sprintf(fuLockWaitSQL, b.Table),
		qCreate: fmt.Sprintf(fuCreateSQL, b.Table),
		qFence:  fmt.Sprintf(fuFenceSQL, b.Table),
	}
	d.t = sqllock.NewTable[*sql.Conn](d, b.Base, sqllock.TableConfig{Keepalive: keepalive, Noun: "connection", IDName: "id", Limit: d.limit})
	b.cleanup = d.cleanupPass
	return d
}

func (d *fuDriver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, Notify: true, SessionBound: true}
}

// TryAcquire locks the row with NOWAIT.
func (d *fuDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	return d.t.Acquire(ctx, req, false)
}

// Acquire waits for the row lock inside the server. When ctx ends, the
// waiting statement is stopped with KILL QUERY and the connection is
// discarded.
func (d *fuDriver) Acquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	return d.t.Acquire(ctx, req, true)
}

// Close rolls back and discards the connections of locks still held
// (distlock has released its leases before), stops keepalives and closes a
// URL-opened pool.
func (d *fuDriver) Close() error {
	d.t.Close()
	return d.Shutdown()
}

// limit fails at once when the pool could not serve one more pinned
// connection and still keep one free for the fence counter and KILL QUERY.
func (d *fuDriver) limit(pinned int) error {
	if maxOpen := d.db.Stats().MaxOpenConnections; maxOpen > 0 && pinned >= maxOpen-1 {
		return fmt.Errorf("%w: every connection the pool may open is taken: %d locks are held or awaited on pinned connections and the pool's MaxOpenConns is %d (one is kept free for the fence counter and KILL QUERY); raise the pool size (URL parameter maxConns)",
			backend.ErrUnavailable, pinned, maxOpen)
	}
	return nil
}

// Lock implements sqllock.Server: it pins a connection, opens a
// transaction and locks the key's row in it, creating the row first if it
// does not exist; then it advances the fence on another connection and
// checks that the pinned connection is still alive, so the token is
// committed and was issued while the row lock was held. On any failure the
// connection is rolled back or discarded, never returned to the pool
// holding a lock.
func (d *fuDriver) Lock(ctx context.Context, req backend.Request, wait bool) (sqllock.Pinned[*sql.Conn], error) {
	key := req.Key
	var none sqllock.Pinned[*sql.Conn]
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return none, sqllock.Failed(ctx, err)
	}
	a := &fuAttempt{d: d, conn: conn, clean: true}
	h := keyHash(key)
	if err := a.lockOrCreate(ctx, h, key, wait); err != nil {
		return none, a.fail(err)
	}
	a.clean = false // the transaction holds the row lock
	tok, err := d.issueFence(ctx, h, req, a.connID)
	if err != nil {
		return none, a.fail(err)
	}
	// The pinned connection must have held the row lock when the token
	// was issued: if it is alive now, it was alive then.
	sent := d.Now()
	id, idle, err := d.sessionInfo(ctx, conn)
	if err != nil {
		return none, a.fail(fmt.Errorf("the lock's connection failed while the fence was issued: %w", sqllock.Failed(ctx, err)))
	}
	return sqllock.Pinned[*sql.Conn]{Conn: conn, ID: id, Token: tok, Bound: idle, Sent: sent}, nil
}

// fuAttempt is one acquisition's pinned connection until its row is
// locked.
type fuAttempt struct {
	d      *fuDriver
	conn   *sql.Conn
	clean  bool  // no transaction is open: the connection may go back to the pool
	connID int64 // the server's connection id, once asked
}

// fail gives the connection back (clean) or discards it, and returns err.
func (a *fuAttempt) fail(err error) error {
	if a.clean {
		_ = a.conn.Close()
	} else {
		a.d.abandonConn(a.conn)
	}
	return err
}

// id returns the connection's server id, asking once.
func (a *fuAttempt) id(ctx context.Context) (int64, error) {
	if a.connID == 0 {
		id, _, err := a.d.sessionInfo(ctx, a.conn)
		if err != nil {
			return 0, sqllock.Failed(ctx, err)
		}
		a.connID = id
	}
	return a.connID, nil
}

// lockOrCreate locks the key's row in a transaction on the attempt's
// connection, creating the row when it is missing.
func (a *fuAttempt) lockOrCreate(ctx context.Context, h [32]byte, key string, wait bool) error {
	for created := 0; ; created++ {
		found, err := a.lockRow(ctx, h, wait)
		if err != nil || found {
			return err
		}
		if created == createAttempts {
			return fmt.Errorf("%w: the lock row was not created after %d attempts", backend.ErrUnavailable, createAttempts)
		}
		if err := a.createRow(ctx, h, key, wait); err != nil {
			return err
		}
	}
}

// lockRow opens a transaction and locks the row with a locking read,
// NOWAIT first and then, with wait, waiting in the server (a lock-wait
// timeout or a deadlock rolls back and starts afresh). found reports that
// the row exists and is locked, its transaction open; a missing row's
// transaction is rolled back, as its read holds a gap lock.
func (a *fuAttempt) lockRow(ctx context.Context, h [32]byte, wait bool) (found bool, err error) {
	for {
		a.clean = false
		if _, err := a.conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
			return false, sqllock.Failed(ctx, err)
		}
		found, err := a.lockRead(ctx, a.d.qNowait, h)
		if isLockBusy(err) {
			if !wait {
				if rollback(ctx, a.conn) == nil {
					a.clean = true
				}
				return false, backend.Busy(0)
			}
			found, err = a.waitRow(ctx, h)
			if ctx.Err() != nil {
				return false, sqllock.WaitCut(ctx, err)
			}
			if mysqlCode(err) == erLockWaitTimeout {
				// innodb_lock_wait_timeout: the statement was rolled
				// back, the transaction is still open. Start afresh.
				if err := rollback(ctx, a.conn); err != nil {
					return false, sqllock.Failed(ctx, err)
				}
				a.clean = true
				continue
			}
		}
		switch {
		case mysqlCode(err) == erLockDeadlock:
			// InnoDB rolled the transaction back. Unlikely for one
			// row; try again.
			a.clean = true
			continue
		case err != nil:
			return false, sqllock.Failed(ctx, err)
		case found:
			return true, nil
		}
		if err := rollback(ctx, a.conn); err != nil {
			return false, sqllock.Failed(ctx, err)
		}
		a.clean = true
		return false, nil
	}
}

// waitRow runs the locking read that waits for the row lock, stopped with
// KILL QUERY when ctx ends.
func (a *fuAttempt) waitRow(ctx context.Context, h [32]byte) (found bool, err error) {
	id, err := a.id(ctx)
	if err != nil {
		return false, err
	}
	_, err = a.d.killable(ctx, id, 0, func(qctx context.Context) error {
		found, err = a.lockRead(qctx, a.d.qWait, h)
		return err
	})
	return found, err
}

// createRow creates the missing row with an autocommit INSERT IGNORE. That
// INSERT waits if someone else created the row meanwhile and holds it
// locked: TryAcquire bounds the wait and reports the lock busy, Acquire
// waits for the holder like the locking read would.
func (a *fuAttempt) createRow(ctx context.Context, h [32]byte, key string, wait bool) error {
	id, err := a.id(ctx)
	if err != nil {
		a.clean = false
		return err
	}
	limit := time.Duration(0)
	if !wait {
		limit = createBusyAfter
	}
	timedOut, err := a.d.killable(ctx, id, limit, func(qctx context.Context) error {
		_, err := a.conn.ExecContext(qctx, a.d.qCreate, h[:], []byte(key))
		return err
	})
	switch {
	case ctx.Err() != nil:
		a.clean = false
		return sqllock.WaitCut(ctx, err)
	case timedOut:
		a.clean = false
		return backend.Busy(0)
	case err != nil && !isLockBusy(err) && mysqlCode(err) != erLockDeadlock:
		a.clean = false
		return sqllock.Failed(ctx, err)
	}
	return nil
}

// issueFence advances the key's fence on another connection while the
// row is locked: it commits at once, so a token is never handed out twice,
// even when the pinned connection dies before COMMIT.
func (d *fuDriver) issueFence(ctx context.Context, h [32]byte, req backend.Request, connID int64) (uint64, error) {
	owner, md := []byte(req.Owner), []byte(req.Metadata)
	floor := floorHash(h)
	res, err := d.db.ExecContext(ctx, d.qFence, h[:], []byte(req.Key), floor[:], owner, md, connID, owner, md, connID)
	if err != nil {
		return 0, sqllock.Failed(ctx, err)
	}
	tok, err := res.LastInsertId()
	if err != nil || tok <= 0 {
		return 0, fmt.Errorf("%w: fence update returned %d: %v", backend.ErrUnavailable, tok, err)
	}
	return uint64(tok), nil
}

// lockRead runs a locking read and reports whether the row exists (and is
// now locked); it learns the connection's id from it.
func (a *fuAttempt) lockRead(ctx context.Context, q string, h [32]byte) (bool, error) {
	id, found, err := lockRead(ctx, a.conn, q, h)
	if found {
		a.connID = id
	}
	return found, err
}

// lockRead runs a locking read on conn and reports whether the row exists
// (and is now locked), with the connection's id.
func lockRead(ctx context.Context, conn *sql.Conn, q string, h [32]byte) (id int64, found bool, err error) {
	err = conn.QueryRowContext(ctx, q, h[:]).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return id, err == nil, err
}

// killable runs a statement that may wait for a row lock on the pinned
// connection connID (sqllock.Stoppable): when ctx ends or limit (if
// positive) passes, KILL QUERY from another connection stops it — go-sql-
// driver would close the socket, and the server would leave the orphaned
// statement queued for the lock — and the socket is closed only if that
// fails, or if the killed statement's reply has not come killedGrace after
// the KILL (lost on its way: the server has ended the statement, and the
// connection is discarded anyway). timedOut reports that limit stopped
// it. After a stop the caller must discard the connection.
func (d *fuDriver) killable(ctx context.Context, connID int64, limit time.Duration, run func(ctx context.Context) error) (timedOut bool, err error) {
	return sqllock.Stoppable(ctx, limit, killedGrace, func(abort func()) {
		kctx, cancel := context.WithTimeout(context.Background(), killTimeout)
		defer cancel()
		if _, err := d.db.ExecContext(kctx, "KILL QUERY "+strconv.FormatInt(connID, 10)); err != nil {
			abort()
		}
	}, run)
}

func rollback(ctx context.Context, conn *sql.Conn) error {
	_, err := conn.ExecContext(ctx, "ROLLBACK")
	return err
}

// Ping implements sqllock.Server.
func (d *fuDriver) Ping(ctx context.Context, conn *sql.Conn) error { return conn.PingContext(ctx) }

// Unlock implements sqllock.Server: COMMIT frees the row for the next
// waiter and the connection goes back to the pool. If the commit fails the
// connection is discarded, which ends the lock too.
func (d *fuDriver) Unlock(ctx context.Context, p *sqllock.Pinned[*sql.Conn]) error {
	_, err := p.Conn.ExecContext(ctx, "COMMIT")
	if err == nil {
		err = p.Conn.Close() // back to the pool, with no transaction open
	} else {
		discard(p.Conn)
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("commit interrupted, so the connection was dropped and the server rolls the lock back: %w", sqllock.Failed(ctx, err))
	default:
		return fmt.Errorf("%w: commit failed, the lock ended with its connection (id %d): %w", backend.ErrLockLost, p.ID, err)
	}
}

// Discard implements sqllock.Server.
func (d *fuDriver) Discard(conn *sql.Conn) { discard(conn) }

// Abandon implements sqllock.Server: abandonConn.
func (d *fuDriver) Abandon(conn *sql.Conn) { d.abandonConn(conn) }

// abandonConn rolls back (bounded) and discards a connection that may hold a
// lock or be in an unknown state: it is closed, never returned to the pool,
// so no other goroutine can run inside its transaction. Closing the
// connection makes the server roll back whatever the ROLLBACK did not.
func (d *fuDriver) abandonConn(conn *sql.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	_ = rollback(ctx, conn)
	cancel()
	discard(conn)
}

// discard closes conn's driver connection instead of returning it to the
// pool.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}
