package postgres

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// Semaphores (Locker.Semaphore), row mode only, in a permit table named
// after the lock table with the suffix "_permits". An acquisition is one
// transaction that runs one at a time per key; a permit's token is its
// semaphore's fence + 1. Capabilities: Fencing, Expiring, Durable.
// Advisory mode refuses semaphores.
const (
	permitTableDDL = `CREATE TABLE IF NOT EXISTS %s (
  sem_key    bytea       NOT NULL,
  id         bytea       NOT NULL,
  expires_at timestamptz NOT NULL,
  fence      bigint      NOT NULL,
  permits    integer     NOT NULL,
  PRIMARY KEY (sem_key, id)
)`
	// Arguments: key, permits. Locks the semaphore's own row.
	semLockSQL = `INSERT INTO %[1]s AS s (sem_key, id, expires_at, fence, permits) VALUES ($1, ''::bytea, 'infinity', 0, $2)
ON CONFLICT (sem_key, id) DO UPDATE SET permits = s.permits RETURNING permits`
	// Arguments: key. Returns the live permits and the µs until the first
	// of them expires.
	semCountSQL = `WITH gone AS (DELETE FROM %[1]s WHERE sem_key = $1 AND id <> ''::bytea AND expires_at <= clock_timestamp())
SELECT count(*), COALESCE(min(GREATEST(1, (EXTRACT(EPOCH FROM (expires_at - clock_timestamp())) * 1000000)::bigint)), 0)
FROM %[1]s WHERE sem_key = $1 AND id <> ''::bytea AND expires_at > clock_timestamp()`
	// Arguments: key, permits, id, ttl µs.
	semGrantSQL = `WITH f AS (UPDATE %[1]s SET fence = fence + 1, permits = $2 WHERE sem_key = $1 AND id = ''::bytea RETURNING fence)
INSERT INTO %[1]s (sem_key, id, expires_at, fence, permits)
SELECT $1, $3, clock_timestamp() + $4::bigint * interval '1 microsecond', f.fence, $2 FROM f RETURNING fence`
	// Arguments: key, id, ttl µs.
	permitRefreshSQL = `UPDATE %[1]s SET expires_at = GREATEST(expires_at, clock_timestamp() + $3::bigint * interval '1 microsecond')
WHERE sem_key = $1 AND id = $2 AND id <> ''::bytea AND expires_at > clock_timestamp() RETURNING fence`
	// Arguments: key, id.
	permitReleaseSQL = `DELETE FROM %[1]s WHERE sem_key = $1 AND id = $2 AND id <> ''::bytea AND expires_at > clock_timestamp()`
	// Arguments: key, id.
	permitAbandonSQL = `DELETE FROM %[1]s WHERE sem_key = $1 AND id = $2 AND id <> ''::bytea`
)

// permitTable is a row-mode driver's permit table and its statements,
// made once.
type permitTable struct {
	sqllock.Permits
	qLock, qCount, qGrant, qRefresh, qRelease, qAbandon, ddl string
}

func (d *rowDriver) permits(ctx context.Context) (*permitTable, error) {
	pt := &d.sem
	if err := pt.Init(dialect, d.Name, func(t string) {
		pt.ddl = fmt.Sprintf(permitTableDDL, t)
		pt.qLock, pt.qCount, pt.qGrant = fmt.Sprintf(semLockSQL, t), fmt.Sprintf(semCountSQL, t), fmt.Sprintf(semGrantSQL, t)
		pt.qRefresh, pt.qRelease, pt.qAbandon = fmt.Sprintf(permitRefreshSQL, t), fmt.Sprintf(permitReleaseSQL, t), fmt.Sprintf(permitAbandonSQL, t)
	}); err != nil {
		return nil, err
	}
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	return pt, pt.Ready(ctx, d.Create, func(ctx context.Context) error {
		if _, err := d.pool.Exec(ctx, pt.ddl); err != nil {
			if c := pgCode(err); c != "23505" && c != "42P07" && c != "42710" {
				return failed(ctx, err)
			}
		}
		return nil
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
	key := []byte(req.Key)
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	token, err := d.grantPermit(ctx, pt, key, id, permits, req.TTL)
	if err != nil {
		if sqllock.Refused(err, req.Key) {
			return nil, err
		}
		if !serverRejected(err) {
			d.Undo(req.TTL, func(ctx context.Context) (bool, error) {
				tag, err := d.pool.Exec(ctx, pt.qAbandon, key, id)
				return err == nil && tag.RowsAffected() > 0, err
			})
		}
		return nil, failed(ctx, err)
	}
	return &permitLock{d: d, pt: pt, key: key, id: id, token: token}, nil
}

// grantPermit runs the acquisition's transaction.
func (d *rowDriver) grantPermit(ctx context.Context, pt *permitTable, key, id []byte, permits int, ttl time.Duration) (uint64, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var have int
	if err := tx.QueryRow(ctx, pt.qLock, key, permits).Scan(&have); err != nil {
		return 0, err
	}
	var live, firstUS int64
	if err := tx.QueryRow(ctx, pt.qCount, key).Scan(&live, &firstUS); err != nil {
		return 0, err
	}
	if err := sqllock.Admit(live, have, permits, firstUS); err != nil {
		if cerr := tx.Commit(ctx); cerr != nil { // keep the expired permits' deletion
			return 0, cerr
		}
		return 0, err
	}
	var fence int64
	if err := tx.QueryRow(ctx, pt.qGrant, key, permits, id, ttlMicros(ttl)).Scan(&fence); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return uint64(fence), nil
}

// permitLock is one held permit.
type permitLock struct {
	d     *rowDriver
	pt    *permitTable
	key   []byte
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
	var fence int64
	err := l.d.pool.QueryRow(ctx, l.pt.qRefresh, l.key, l.id, ttlMicros(ttl)).Scan(&fence)
	if errors.Is(err, pgx.ErrNoRows) {
		return sqllock.ErrPermitNotHeld
	}
	return failed(ctx, err)
}

// Release gives the permit back, if it has not expired.
func (l *permitLock) Release(ctx context.Context) error {
	tag, err := l.d.pool.Exec(ctx, l.pt.qRelease, l.key, l.id)
	if err != nil {
		return failed(ctx, err)
	}
	if tag.RowsAffected() == 0 {
		return sqllock.ErrPermitNotHeld
	}
	return nil
}

// NoSemaphore: advisory mode refuses semaphores.
func (d *advDriver) NoSemaphore() error {
	return fmt.Errorf("%w: postgres advisory mode has no semaphores: an advisory lock is a per-session mutex with nothing to count holders by; use mode=row", backend.ErrInvalidOption)
}
