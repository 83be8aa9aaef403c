package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// Semaphores (Locker.Semaphore), row mode only: sqllock.Permits runs them
// on these statements, in a permit table named after the lock table with
// the suffix "_permits". Advisory mode refuses semaphores.
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

// permitSQL is row mode's dialect of the permit table (sqllock.PermitSQL).
type permitSQL struct {
	pool *pgxpool.Pool

	ddl, qLock, qCount, qGrant, qRefresh, qRelease, qAbandon string
}

func newPermitSQL(pool *pgxpool.Pool, t string) sqllock.PermitSQL {
	return &permitSQL{
		pool: pool, ddl: fmt.Sprintf(permitTableDDL, t),
		qLock: fmt.Sprintf(semLockSQL, t), qCount: fmt.Sprintf(semCountSQL, t), qGrant: fmt.Sprintf(semGrantSQL, t),
		qRefresh: fmt.Sprintf(permitRefreshSQL, t), qRelease: fmt.Sprintf(permitReleaseSQL, t), qAbandon: fmt.Sprintf(permitAbandonSQL, t),
	}
}

var (
	_ backend.Permitter = (*rowDriver)(nil)
	_ backend.Permitter = (*advDriver)(nil)
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

// Key is the semaphore key itself.
func (q *permitSQL) Key(key string) []byte { return []byte(key) }

func (q *permitSQL) Create(ctx context.Context) error { return createTable(ctx, q.pool, q.ddl) }

func (q *permitSQL) Begin(ctx context.Context) (sqllock.PermitTx, error) {
	tx, err := q.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &permitTx{q: q, tx: tx}, nil
}

func (q *permitSQL) Refresh(ctx context.Context, key, id []byte, ttlUS int64) (bool, error) {
	var fence int64
	err := q.pool.QueryRow(ctx, q.qRefresh, key, id, ttlUS).Scan(&fence)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (q *permitSQL) Release(ctx context.Context, key, id []byte) (bool, error) {
	tag, err := q.pool.Exec(ctx, q.qRelease, key, id)
	return err == nil && tag.RowsAffected() > 0, err
}

func (q *permitSQL) Abandon(ctx context.Context, key, id []byte) (bool, error) {
	tag, err := q.pool.Exec(ctx, q.qAbandon, key, id)
	return err == nil && tag.RowsAffected() > 0, err
}

func (q *permitSQL) Rejected(err error) bool { return serverRejected(err) }

func (q *permitSQL) Failed(ctx context.Context, err error) error { return permitFailed(ctx, err) }

// permitTx is an acquisition's transaction (sqllock.PermitTx).
type permitTx struct {
	q  *permitSQL
	tx pgx.Tx
}

// Count locks the semaphore's row in its upsert, and deletes the expired
// permits in the count's statement.
func (t *permitTx) Count(ctx context.Context, key []byte, permits int) (have int, live, firstUS int64, err error) {
	if err = t.tx.QueryRow(ctx, t.q.qLock, key, permits).Scan(&have); err != nil {
		return
	}
	err = t.tx.QueryRow(ctx, t.q.qCount, key).Scan(&live, &firstUS)
	return
}

// Grant raises the fence and inserts the permit in one statement.
func (t *permitTx) Grant(ctx context.Context, key, id []byte, permits int, ttlUS int64) (uint64, error) {
	var fence int64
	err := t.tx.QueryRow(ctx, t.q.qGrant, key, permits, id, ttlUS).Scan(&fence)
	return uint64(fence), err
}

func (t *permitTx) Commit(ctx context.Context) error { return t.tx.Commit(ctx) }

func (t *permitTx) Rollback(ctx context.Context) { _ = t.tx.Rollback(ctx) }

// PermitCapabilities implements backend.Permitter: this mode refuses
// semaphores, and the error says why.
func (d *advDriver) PermitCapabilities() (backend.Capabilities, error) {
	return backend.Capabilities{}, fmt.Errorf("%w: postgres advisory mode has no semaphores: an advisory lock is a per-session mutex with nothing to count holders by; use mode=row", backend.ErrInvalidOption)
}
