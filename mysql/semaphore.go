package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// Semaphores (Locker.Semaphore), row mode only: sqllock.Permits runs them
// on these statements, in a permit table named after the lock table with
// the suffix "_permits". Forupdate mode refuses semaphores.
const (
	permitTableDDL = `CREATE TABLE IF NOT EXISTS %s (
  key_hash   BINARY(32)      NOT NULL COMMENT 'SHA-256 of the semaphore key',
  id         VARBINARY(16)   NOT NULL COMMENT 'permit id; empty for the semaphore''s own row',
  expires_at DATETIME(6)     NOT NULL COMMENT 'UTC, database clock',
  fence      BIGINT UNSIGNED NOT NULL COMMENT 'own row: last fencing token issued',
  permits    INT             NOT NULL COMMENT 'the permit count',
  PRIMARY KEY (key_hash, id)
) ENGINE=InnoDB COMMENT='distlock semaphore permits'`
	// Arguments: hash, permits.
	semLockSQL = `INSERT INTO %[1]s (key_hash, id, expires_at, fence, permits) VALUES (?, '', '9999-12-31 23:59:59', 0, ?)
ON DUPLICATE KEY UPDATE permits = permits`
	// Arguments: hash.
	semHaveSQL = `SELECT permits FROM %[1]s WHERE key_hash = ? AND id = '' FOR UPDATE`
	// Arguments: hash.
	semPurgeSQL = `DELETE FROM %[1]s WHERE key_hash = ? AND id <> '' AND expires_at <= UTC_TIMESTAMP(6)`
	// Arguments: hash. The live permits and the µs until the first expires.
	semCountSQL = `SELECT COUNT(*), IFNULL(GREATEST(1, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MIN(expires_at))), 0)
FROM %[1]s WHERE key_hash = ? AND id <> '' AND expires_at > UTC_TIMESTAMP(6) FOR UPDATE`
	// Arguments: permits, hash.
	semFenceSQL = `UPDATE %[1]s SET fence = LAST_INSERT_ID(fence + 1), permits = ? WHERE key_hash = ? AND id = ''`
	// Arguments: hash, id, ttl µs, fence, permits.
	semGrantSQL = `INSERT INTO %[1]s (key_hash, id, expires_at, fence, permits) VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, ?)`
	// Arguments: ttl µs, hash, id. Reports the fence through
	// LAST_INSERT_ID (0: no unexpired permit matched).
	permitRefreshSQL = `UPDATE %[1]s SET expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), fence = LAST_INSERT_ID(fence)
WHERE key_hash = ? AND id = ? AND id <> '' AND expires_at > UTC_TIMESTAMP(6)`
	// Arguments: hash, id.
	permitReleaseSQL = `DELETE FROM %[1]s WHERE key_hash = ? AND id = ? AND id <> '' AND expires_at > UTC_TIMESTAMP(6)`
	// Arguments: hash, id.
	permitAbandonSQL = `DELETE FROM %[1]s WHERE key_hash = ? AND id = ? AND id <> ''`
)

// permitSQL is row mode's dialect of the permit table (sqllock.PermitSQL).
type permitSQL struct {
	db    *sql.DB
	table string // quoted

	ddl, qLock, qHave, qPurge, qCount, qFence, qGrant, qRefresh, qRelease, qAbandon string
}

func newPermitSQL(db *sql.DB, t string) sqllock.PermitSQL {
	return &permitSQL{
		db: db, table: t, ddl: fmt.Sprintf(permitTableDDL, t),
		qLock: fmt.Sprintf(semLockSQL, t), qHave: fmt.Sprintf(semHaveSQL, t), qPurge: fmt.Sprintf(semPurgeSQL, t), qCount: fmt.Sprintf(semCountSQL, t),
		qFence: fmt.Sprintf(semFenceSQL, t), qGrant: fmt.Sprintf(semGrantSQL, t),
		qRefresh: fmt.Sprintf(permitRefreshSQL, t), qRelease: fmt.Sprintf(permitReleaseSQL, t), qAbandon: fmt.Sprintf(permitAbandonSQL, t),
	}
}

var (
	_ backend.Permitter = (*rowDriver)(nil)
	_ backend.Permitter = (*fuDriver)(nil)
)

// PermitCapabilities implements backend.Permitter: Fencing, Expiring, Durable.
func (d *rowDriver) PermitCapabilities() (backend.Capabilities, error) {
	return d.sem.Capabilities(), nil
}

// tryAcquirePermit takes one of req.Permits permits of req.Key in one
// transaction (sqllock.Permits).
func (d *rowDriver) tryAcquirePermit(ctx context.Context, req backend.Request) (backend.Lock, error) {
	return d.sem.TryAcquire(ctx, req, req.Permits)
}

// Key is the SHA-256 of the semaphore key.
func (q *permitSQL) Key(key string) []byte {
	h := keyHash(key)
	return h[:]
}

func (q *permitSQL) Create(ctx context.Context) error {
	_, err := q.db.ExecContext(ctx, q.ddl)
	return sqllock.Failed(ctx, err)
}

func (q *permitSQL) Begin(ctx context.Context) (sqllock.PermitTx, error) {
	tx, err := q.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &permitTx{q: q, tx: tx}, nil
}

func (q *permitSQL) Refresh(ctx context.Context, key, id []byte, ttlUS int64) (bool, error) {
	res, err := q.db.ExecContext(ctx, q.qRefresh, ttlUS, key, id)
	return matched(res, err, sql.Result.LastInsertId)
}

func (q *permitSQL) Release(ctx context.Context, key, id []byte) (bool, error) {
	res, err := q.db.ExecContext(ctx, q.qRelease, key, id)
	return matched(res, err, sql.Result.RowsAffected)
}

func (q *permitSQL) Abandon(ctx context.Context, key, id []byte) (bool, error) {
	res, err := q.db.ExecContext(ctx, q.qAbandon, key, id)
	return matched(res, err, sql.Result.RowsAffected)
}

// matched reports whether a statement matched a permit: its result n (the
// refreshed permit's fence through LAST_INSERT_ID, 0 when none matched; the
// rows deleted) is not 0.
func matched(res sql.Result, err error, n func(sql.Result) (int64, error)) (bool, error) {
	if err != nil {
		return false, err
	}
	v, err := n(res)
	return err == nil && v != 0, err
}

func (q *permitSQL) Rejected(err error) bool { return serverRejected(err) }

func (q *permitSQL) Failed(ctx context.Context, err error) error { return sqllock.Failed(ctx, err) }

// permitTx is an acquisition's transaction (sqllock.PermitTx).
type permitTx struct {
	q  *permitSQL
	tx *sql.Tx
}

func (t *permitTx) Count(ctx context.Context, key []byte, permits int) (have int, live, firstUS int64, err error) {
	if _, err = t.tx.ExecContext(ctx, t.q.qLock, key, permits); err != nil {
		return
	}
	if err = t.tx.QueryRowContext(ctx, t.q.qHave, key).Scan(&have); err != nil {
		return
	}
	if _, err = t.tx.ExecContext(ctx, t.q.qPurge, key); err != nil {
		return
	}
	err = t.tx.QueryRowContext(ctx, t.q.qCount, key).Scan(&live, &firstUS)
	return
}

// Grant raises the fence through LAST_INSERT_ID, then inserts the permit.
func (t *permitTx) Grant(ctx context.Context, key, id []byte, permits int, ttlUS int64) (uint64, error) {
	res, err := t.tx.ExecContext(ctx, t.q.qFence, permits, key)
	if err != nil {
		return 0, err
	}
	fence, err := res.LastInsertId()
	if err != nil {
		return 0, err
	}
	if fence <= 0 {
		return 0, fmt.Errorf("%w: semaphore fence statement returned %d (is %s the distlock permit table?)", backend.ErrUnavailable, fence, t.q.table)
	}
	if _, err := t.tx.ExecContext(ctx, t.q.qGrant, key, id, ttlUS, fence, permits); err != nil {
		return 0, err
	}
	return uint64(fence), nil
}

func (t *permitTx) Commit(context.Context) error { return t.tx.Commit() }

func (t *permitTx) Rollback(context.Context) { _ = t.tx.Rollback() }

// PermitCapabilities implements backend.Permitter: this mode refuses
// semaphores, and the error says why.
func (d *fuDriver) PermitCapabilities() (backend.Capabilities, error) {
	return backend.Capabilities{}, fmt.Errorf("%w: mysql forupdate mode has no semaphores: a row locked FOR UPDATE has one holder, with nothing to count holders by; use mode=row", backend.ErrInvalidOption)
}
