package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// Semaphores (Locker.Semaphore), row mode only, in a permit table named
// after the lock table with the suffix "_permits". An acquisition is one
// transaction that runs one at a time per key; a permit's token is its
// semaphore's fence + 1. Capabilities: Fencing, Expiring, Durable.
// Forupdate mode refuses semaphores.
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

// permitTable is a row-mode driver's permit table and its statements,
// made once.
type permitTable struct {
	sqllock.Permits
	qLock, qHave, qPurge, qCount, qFence, qGrant, qRefresh, qRelease, qAbandon, ddl string
}

func (d *rowDriver) permits(ctx context.Context) (*permitTable, error) {
	pt := &d.sem
	if err := pt.Init(dialect, d.Name, func(t string) {
		pt.ddl = fmt.Sprintf(permitTableDDL, t)
		pt.qLock, pt.qHave, pt.qPurge, pt.qCount = fmt.Sprintf(semLockSQL, t), fmt.Sprintf(semHaveSQL, t), fmt.Sprintf(semPurgeSQL, t), fmt.Sprintf(semCountSQL, t)
		pt.qFence, pt.qGrant = fmt.Sprintf(semFenceSQL, t), fmt.Sprintf(semGrantSQL, t)
		pt.qRefresh, pt.qRelease, pt.qAbandon = fmt.Sprintf(permitRefreshSQL, t), fmt.Sprintf(permitReleaseSQL, t), fmt.Sprintf(permitAbandonSQL, t)
	}); err != nil {
		return nil, err
	}
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	return pt, pt.Ready(ctx, d.Create, func(ctx context.Context) error {
		_, err := d.db.ExecContext(ctx, pt.ddl)
		return sqllock.Failed(ctx, err)
	})
}

// PermitCapabilities: Fencing, Expiring, Durable.
func (d *rowDriver) PermitCapabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Expiring: true, Durable: true}
}

// TryAcquirePermit takes one of permits permits of req.Key in one
// transaction (see above).
func (d *rowDriver) TryAcquirePermit(ctx context.Context, req backend.Request, permits int) (backend.Lock, error) {
	pt, err := d.permits(ctx)
	if err != nil {
		return nil, err
	}
	h := keyHash(req.Key)
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	token, err := d.grantPermit(ctx, pt, h, id, permits, req.TTL)
	if err != nil {
		switch {
		case sqllock.Refused(err, req.Key):
			return nil, err
		case !serverRejected(err):
			d.Undo(req.TTL, func(ctx context.Context) (bool, error) {
				res, err := d.db.ExecContext(ctx, pt.qAbandon, h[:], id)
				if err != nil {
					return false, err
				}
				n, err := res.RowsAffected()
				return err == nil && n > 0, err
			})
		}
		return nil, sqllock.Failed(ctx, err)
	}
	return &permitLock{d: d, pt: pt, hash: h, id: id, token: token}, nil
}

// grantPermit runs the acquisition's transaction.
func (d *rowDriver) grantPermit(ctx context.Context, pt *permitTable, h [32]byte, id []byte, permits int, ttl time.Duration) (uint64, error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, pt.qLock, h[:], permits); err != nil {
		return 0, err
	}
	var have int
	if err := tx.QueryRowContext(ctx, pt.qHave, h[:]).Scan(&have); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, pt.qPurge, h[:]); err != nil {
		return 0, err
	}
	var live, firstUS int64
	if err := tx.QueryRowContext(ctx, pt.qCount, h[:]).Scan(&live, &firstUS); err != nil {
		return 0, err
	}
	if err := sqllock.Admit(live, have, permits, firstUS); err != nil {
		if cerr := tx.Commit(); cerr != nil { // keep the expired permits' deletion
			return 0, cerr
		}
		return 0, err
	}
	res, err := tx.ExecContext(ctx, pt.qFence, permits, h[:])
	if err != nil {
		return 0, err
	}
	fence, err := res.LastInsertId()
	if err != nil {
		return 0, err
	}
	if fence <= 0 {
		return 0, fmt.Errorf("%w: semaphore fence statement returned %d (is %s the distlock permit table?)", backend.ErrUnavailable, fence, pt.Table)
	}
	if _, err := tx.ExecContext(ctx, pt.qGrant, h[:], id, ttlMicros(ttl), fence, permits); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return uint64(fence), nil
}

// permitLock is one held permit.
type permitLock struct {
	d     *rowDriver
	pt    *permitTable
	hash  [32]byte
	id    []byte
	token uint64
}

func (l *permitLock) Token() uint64 { return l.token }

// Refresh extends the permit to at least ttl from now by the database
// clock, if it has not expired.
func (l *permitLock) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := sqllock.CheckTTL(ttl); err != nil {
		return err
	}
	res, err := l.d.db.ExecContext(ctx, l.pt.qRefresh, ttlMicros(ttl), l.hash[:], l.id)
	return permitOutcome(ctx, res, err, func(r sql.Result) (int64, error) { return r.LastInsertId() })
}

// Release gives the permit back, if it has not expired.
func (l *permitLock) Release(ctx context.Context) error {
	res, err := l.d.db.ExecContext(ctx, l.pt.qRelease, l.hash[:], l.id)
	return permitOutcome(ctx, res, err, func(r sql.Result) (int64, error) { return r.RowsAffected() })
}

// permitOutcome is ErrNotHeld when the statement matched no permit (n is 0).
func permitOutcome(ctx context.Context, res sql.Result, err error, n func(sql.Result) (int64, error)) error {
	if err != nil {
		return sqllock.Failed(ctx, err)
	}
	v, err := n(res)
	if err != nil {
		return sqllock.Failed(ctx, err)
	}
	if v == 0 {
		return sqllock.ErrPermitNotHeld
	}
	return nil
}

// NoSemaphore: forupdate mode refuses semaphores.
func (d *fuDriver) NoSemaphore() error {
	return fmt.Errorf("%w: mysql forupdate mode has no semaphores: a row locked FOR UPDATE has one holder, with nothing to count holders by; use mode=row", backend.ErrInvalidOption)
}
