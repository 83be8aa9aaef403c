package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// busyBit marks an acquire reply that carries the holder's remaining
// microseconds instead of a fence. Fences never reach 2^63.
const busyBit = uint64(1) << 63

// freeExpiry is the expires_at of a released row: in the past for any
// database clock, so "free" is simply expires_at <= now.
const freeExpiry = "'1970-01-01 00:00:01'"

// The row-mode statements. Every one reports its outcome through
// LAST_INSERT_ID(expr), which the server returns in the OK packet of the same
// round trip (0 when no expression ran): the fence when the row was granted,
// refreshed or released; busyBit|remaining µs when another owner holds it.
// The statements give the same result whether an assignment sees the
// columns assigned before it (MySQL) or not (MariaDB with
// SIMULTANEOUS_ASSIGNMENT): expires_at, the column every condition reads, is
// assigned last in the upsert, and owner, assigned first, equals the new
// owner exactly when the row is granted.
const (
	// Arguments: hash, key, owner, ttl µs, floor hash, hold, metadata,
	// owner, owner, owner, hold, owner, hold, metadata, ttl µs, owner,
	// ttl µs. A new row's first fence is its bucket's floor + 1 (see
	// cleanup.go); the floor is read with a locking read (InnoDB reads
	// other rows of a non-SELECT statement with shared locks under
	// REPEATABLE READ), so a cleanup raising it is waited for.
	rowAcquireSQL = `INSERT INTO %[1]s (key_hash, lock_key, owner, holds, expires_at, fence, hold_ids, metadata)
VALUES (?, ?, ?, 1, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
  LAST_INSERT_ID(1 + IFNULL((SELECT f.fence FROM (SELECT fence FROM %[1]s WHERE key_hash = ?) AS f), 0)), ?, ?)
ON DUPLICATE KEY UPDATE
  owner = IF(expires_at <= UTC_TIMESTAMP(6), ?, owner),
  fence = IF(expires_at <= UTC_TIMESTAMP(6), LAST_INSERT_ID(fence + 1),
          IF(owner = ?, LAST_INSERT_ID(fence),
          IF(LAST_INSERT_ID(` + "0x8000000000000000" + ` | GREATEST(1, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at))) > 0, fence, fence))),
  holds = IF(expires_at <= UTC_TIMESTAMP(6), 1, IF(owner = ?, holds + 1, holds)),
  hold_ids = IF(expires_at <= UTC_TIMESTAMP(6), ?, IF(owner = ?, CONCAT(IFNULL(hold_ids, ''), ?), hold_ids)),
  metadata = IF(expires_at <= UTC_TIMESTAMP(6), ?, metadata),
  expires_at = IF(expires_at <= UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
               IF(owner = ?, GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), expires_at))`

	// Arguments: ttl µs, hash, owner, fence.
	rowRefreshSQL = `UPDATE %[1]s SET
  expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND),
  fence = LAST_INSERT_ID(fence)
WHERE key_hash = ? AND owner = ? AND fence = ? AND holds > 0 AND expires_at > UTC_TIMESTAMP(6)`

	// rowGiveBack removes one hold, the one whose id is the first
	// argument; the last hold frees the row (its fence stays).
	rowGiveBack = `UPDATE %[1]s SET
  expires_at = IF(holds <= 1, ` + freeExpiry + `, expires_at),
  holds = holds - 1,
  hold_ids = REPLACE(hold_ids, ?, ''),
  fence = LAST_INSERT_ID(fence)
`

	// Arguments: hold, hash, owner, fence.
	rowReleaseSQL = rowGiveBack + `WHERE key_hash = ? AND owner = ? AND fence = ? AND holds > 0 AND expires_at > UTC_TIMESTAMP(6)`

	// Gives back the hold of an acquire whose reply was lost, if it
	// was granted and is still there. Arguments: hold, hash, owner, hold.
	rowAbandonSQL = rowGiveBack + `WHERE key_hash = ? AND owner = ? AND LOCATE(?, hold_ids) > 0 AND holds > 0 AND expires_at > UTC_TIMESTAMP(6)`
)

// holdID names one hold of a lease row: every acquisition records its own
// in the row's hold_ids, appended when it nests, so the hold of an
// acquisition whose reply was lost can be given back exactly — whatever
// the same owner acquired or released since. An id is stored as 32
// lowercase hex digits and a comma; a match of that text in the list can
// only start at an entry's first byte (a comma ends every entry and hex
// has none), so LOCATE finds exactly the entry.
type holdID [33]byte

func newHoldID() holdID {
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	var h holdID
	hex.Encode(h[:32], raw[:])
	h[32] = ','
	return h
}

type rowDriver struct {
	*base
	qAcquire, qRefresh, qRelease, qAbandon string
	qBatchHead                             string           // rowRefreshBatchHead
	batchMax                               int              // locks per batched refresh statement
	sem                                    *sqllock.Permits // semaphore.go
}

func newRowDriver(b *base) *rowDriver {
	d := &rowDriver{
		base:       b,
		qAcquire:   fmt.Sprintf(rowAcquireSQL, b.Table),
		qRefresh:   fmt.Sprintf(rowRefreshSQL, b.Table),
		qRelease:   fmt.Sprintf(rowReleaseSQL, b.Table),
		qAbandon:   fmt.Sprintf(rowAbandonSQL, b.Table),
		qBatchHead: fmt.Sprintf(rowRefreshBatchHead, b.Table),
		batchMax:   rowBatchMax,
	}
	d.sem = sqllock.NewPermits(dialect, b.Base, b.ready, func(t string) sqllock.PermitSQL { return newPermitSQL(b.db, t) })
	b.cleanup = d.cleanupPass
	return d
}

func (d *rowDriver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, Expiring: true, Durable: true}
}

// TryAcquire is one INSERT … ON DUPLICATE KEY UPDATE. When its reply is lost
// (ctx ended or the connection broke after the statement may have run), the
// hold it may have taken is given back in the background, identified by its
// own hold id, so no orphan blocks other owners until the TTL — also when
// the same owner acquires the lock again meanwhile and nests in that hold.
func (d *rowDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if req.Permits > 0 {
		return d.tryAcquirePermit(ctx, req)
	}
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	h := keyHash(req.Key)
	owner := []byte(req.Owner)
	us := ttlMicros(req.TTL)
	hold := newHoldID()
	floor := floorHash(h)
	md := []byte(req.Metadata)
	var (
		res sql.Result
		err error
	)
	for try := 1; ; try++ {
		res, err = d.db.ExecContext(ctx, d.qAcquire,
			h[:], []byte(req.Key), owner, us, floor[:], hold[:], md,
			owner, owner, owner, hold[:], owner, hold[:], md, us, owner, us)
		// A deadlock victim (with a concurrent cleanup pass, which locks
		// floor and lock rows too) was rolled back whole: the statement
		// had no effect, and InnoDB's remedy is to run it again.
		if mysqlCode(err) != erLockDeadlock || try == deadlockTries || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		if !serverRejected(err) {
			d.abandon(h, owner, hold, req.TTL)
		}
		return nil, sqllock.Failed(ctx, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return nil, sqllock.Failed(ctx, err)
	}
	v := uint64(id)
	switch {
	case v == 0:
		return nil, fmt.Errorf("%w: acquire statement returned no outcome (is %s the distlock row-mode table?)", backend.ErrUnavailable, d.Table)
	case v&busyBit != 0:
		return nil, backend.Busy(time.Duration(v&^busyBit) * time.Microsecond)
	}
	return &rowLock{d: d, hash: h, owner: owner, token: v, hold: hold}, nil
}

// deadlockTries is how many times TryAcquire runs its statement while
// InnoDB picks it as a deadlock's victim.
const deadlockTries = 3

// abandon gives back, in the background, the hold that an acquire with
// hold id hold may have taken (Base.Undo: on a schedule, until it is given
// back or the TTL has passed; Close ends it at its first unanswered try).
// The statement matches only a row that lists that hold, and removes it
// from the list, so repeating it is harmless and it never takes a hold
// that another acquisition (even of the same owner) made.
func (d *rowDriver) abandon(h [32]byte, owner []byte, hold holdID, ttl time.Duration) {
	d.Undo(ttl, func(ctx context.Context) (bool, error) {
		res, err := d.db.ExecContext(ctx, d.qAbandon, hold[:], h[:], owner, hold[:])
		if err != nil {
			return false, err
		}
		n, err := res.RowsAffected()
		return err == nil && n > 0, err
	})
}

// rowLock is one hold of a lease row.
type rowLock struct {
	d     *rowDriver
	hash  [32]byte
	owner []byte
	token uint64
	hold  holdID
}

func (l *rowLock) Token() uint64 { return l.token }

var errRowNotHeld = fmt.Errorf("%w: the lease row has expired or belongs to another tenure", backend.ErrNotHeld)

// Refresh extends the row to at least ttl from now by the database clock,
// if this owner still holds it in this tenure (owner and fence match).
func (l *rowLock) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := sqllock.CheckTTL(ttl); err != nil {
		return err
	}
	return l.exec(ctx, l.d.qRefresh, ttlMicros(ttl), l.hash[:], l.owner, l.token)
}

// Release gives up this hold; the last one frees the row (its fence stays).
func (l *rowLock) Release(ctx context.Context) error {
	return l.exec(ctx, l.d.qRelease, l.hold[:], l.hash[:], l.owner, l.token)
}

func (l *rowLock) exec(ctx context.Context, q string, args ...any) error {
	res, err := l.d.db.ExecContext(ctx, q, args...)
	if err != nil {
		return sqllock.Failed(ctx, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return sqllock.Failed(ctx, err)
	}
	if uint64(id) != l.token {
		if id == 0 {
			return errRowNotHeld
		}
		return errors.New("statement reported an unexpected fence")
	}
	return nil
}
