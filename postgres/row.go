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

// The row-mode statements. $ttl is a TTL in whole microseconds. In the
// acquire, the inserted row's expires_at is clock_timestamp() + TTL, read
// once; "now" is that expiry less the TTL, so every condition of the
// statement sees the same instant.
const (
	// Arguments: key, owner, request id, ttl µs, metadata, floor key.
	// Returns (fence, 0) when granted or nested, (NULL, remaining µs) when
	// busy, or no row when the conflicting row is not yet visible (a
	// concurrent first insert): busy too. A new row's first fence is its
	// bucket's floor + 1 (cleanup.go).
	rowAcquireSQL = `WITH up AS (
  INSERT INTO %[1]s AS l (lock_key, owner, holds, expires_at, fence, metadata)
  VALUES ($1, $2, ARRAY[$3::bytea], clock_timestamp() + $4::bigint * interval '1 microsecond',
    1 + COALESCE((SELECT f.fence FROM %[1]s f WHERE f.lock_key = $6::bytea), 0), $5::bytea)
  ON CONFLICT (lock_key) DO UPDATE SET
    owner = EXCLUDED.owner,
    metadata = CASE WHEN l.expires_at <= EXCLUDED.expires_at - $4::bigint * interval '1 microsecond'
                 THEN EXCLUDED.metadata ELSE l.metadata END,
    holds = CASE WHEN l.expires_at <= EXCLUDED.expires_at - $4::bigint * interval '1 microsecond'
                 THEN EXCLUDED.holds ELSE l.holds || EXCLUDED.holds END,
    fence = CASE WHEN l.expires_at <= EXCLUDED.expires_at - $4::bigint * interval '1 microsecond'
                 THEN l.fence + 1 ELSE l.fence END,
    expires_at = GREATEST(l.expires_at, EXCLUDED.expires_at)
  WHERE l.expires_at <= EXCLUDED.expires_at - $4::bigint * interval '1 microsecond' OR l.owner = EXCLUDED.owner
  RETURNING l.fence
)
SELECT fence, 0::bigint FROM up
UNION ALL
SELECT NULL::bigint, GREATEST(1, (EXTRACT(EPOCH FROM (expires_at - clock_timestamp())) * 1000000)::bigint)
FROM %[1]s WHERE lock_key = $1 AND NOT EXISTS (SELECT 1 FROM up)`

	// Arguments: key, owner, fence, request id, ttl µs.
	rowRefreshSQL = `UPDATE %[1]s SET expires_at = GREATEST(expires_at, clock_timestamp() + $5::bigint * interval '1 microsecond')
WHERE lock_key = $1 AND owner = $2 AND fence = $3 AND $4::bytea = ANY(holds) AND expires_at > clock_timestamp()
RETURNING fence`

	// Gives back one hold. Arguments: key, owner, fence, request id.
	// Returns (released, gone): gone reports that the tenure is still the
	// caller's but the hold is no longer in it — what a release that ran
	// before (and whose reply was lost) leaves.
	rowReleaseSQL = `WITH r AS (UPDATE %[1]s SET
  holds = array_remove(holds, $4::bytea),
  expires_at = CASE WHEN cardinality(holds) <= 1 THEN 'epoch'::timestamptz ELSE expires_at END
WHERE lock_key = $1 AND owner = $2 AND fence = $3 AND $4::bytea = ANY(holds) AND expires_at > clock_timestamp()
RETURNING fence, cardinality(holds) AS left)
SELECT EXISTS (SELECT 1 FROM r),
  EXISTS (SELECT 1 FROM %[1]s WHERE lock_key = $1 AND owner = $2 AND fence = $3 AND NOT ($4::bytea = ANY(holds)))%[2]s`

	// Gives back the hold of an acquire whose reply was lost, by its
	// request id alone. Arguments: key, owner, request id.
	rowAbandonSQL = `WITH r AS (UPDATE %[1]s SET
  holds = array_remove(holds, $3::bytea),
  expires_at = CASE WHEN cardinality(holds) <= 1 THEN 'epoch'::timestamptz ELSE expires_at END
WHERE lock_key = $1 AND owner = $2 AND $3::bytea = ANY(holds) AND expires_at > clock_timestamp()
RETURNING cardinality(holds) AS left)
SELECT count(*)%[2]s FROM r`

	// With notifications, the release and the give-back also announce a
	// freed row on the table's channel.
	notifyFreed = `,
  (SELECT count(pg_notify(%s, encode(sha256($1::bytea), 'hex'))) FROM r WHERE r.left = 0)`
)

type rowDriver struct {
	*base
	qAcquire, qRefresh, qRelease, qAbandon, qBatch string
	notify                                         bool
	channel                                        string // quoted LISTEN channel: the table name
	listen                                         *listener
	sem                                            *sqllock.Permits // semaphore.go
}

func newRowDriver(b *base, notify bool) *rowDriver {
	d := &rowDriver{
		base:     b,
		notify:   notify,
		channel:  quoteIdent(b.Name),
		qAcquire: fmt.Sprintf(rowAcquireSQL, b.Table),
		qRefresh: fmt.Sprintf(rowRefreshSQL, b.Table),
		qBatch:   fmt.Sprintf(rowRefreshBatchSQL, b.Table),
	}
	d.sem = sqllock.NewPermits(dialect, b.Base, b.ready, func(t string) sqllock.PermitSQL { return newPermitSQL(b.pool, t) })
	extra := ""
	if notify {
		extra = fmt.Sprintf(notifyFreed, quoteLiteral(b.Name))
		d.listen = newListener(d)
	}
	d.qRelease = fmt.Sprintf(rowReleaseSQL, b.Table, extra)
	d.qAbandon = fmt.Sprintf(rowAbandonSQL, b.Table, extra)
	b.cleanup = d.cleanupPass
	return d
}

func (d *rowDriver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, Expiring: true, Durable: true, Notify: d.notify}
}

// TryAcquire is one upsert. When its reply is lost (ctx ended or the
// connection broke after the statement may have run), the hold it may have
// taken is given back in the background by its request id.
func (d *rowDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if req.Permits > 0 {
		return d.tryAcquirePermit(ctx, req)
	}
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	key, owner := []byte(req.Key), []byte(req.Owner)
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	var fence *int64
	var remaining int64
	err := d.pool.QueryRow(ctx, d.qAcquire, key, owner, id, ttlMicros(req.TTL), []byte(req.Metadata), floorKey(req.Key)).Scan(&fence, &remaining)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, backend.Busy(0)
	case err != nil:
		if !serverRejected(err) {
			d.abandon(key, owner, id, req.TTL)
		}
		return nil, failed(ctx, err)
	case fence == nil:
		return nil, backend.Busy(time.Duration(remaining) * time.Microsecond)
	case *fence <= 0:
		return nil, fmt.Errorf("%w: acquire statement returned fence %d (is %s the distlock row-mode table?)", backend.ErrUnavailable, *fence, d.Table)
	}
	return &rowLock{d: d, key: key, owner: owner, id: id, token: uint64(*fence)}, nil
}

// abandon gives back, in the background, the hold that the acquire with
// request id may have taken (Base.Undo: on a schedule, until it is given
// back or the TTL has passed; Close ends it at its first unanswered try).
// The statement matches only that hold, so repeating it is harmless and it never gives back
// another hold (even of the same owner).
func (d *rowDriver) abandon(key, owner, id []byte, ttl time.Duration) {
	d.Undo(ttl, func(ctx context.Context) (bool, error) {
		var n int64
		var notified int64
		dest := []any{&n}
		if d.notify {
			dest = append(dest, &notified)
		}
		err := d.pool.QueryRow(ctx, d.qAbandon, key, owner, id).Scan(dest...)
		return err == nil && n > 0, err
	})
}

// rowLock is one hold of a lease row.
type rowLock struct {
	d     *rowDriver
	key   []byte
	owner []byte
	id    []byte // this hold's request id
	token uint64
}

func (l *rowLock) Token() uint64 { return l.token }

var errRowNotHeld = fmt.Errorf("%w: the lease row has expired, was released, or belongs to another tenure", backend.ErrNotHeld)

// Refresh extends the row to at least ttl from now by the database clock,
// if this hold is still live in this tenure. A refresh whose connection
// broke is sent once more on another connection (it is idempotent): a
// pooled connection may have died with a server restart unnoticed.
func (l *rowLock) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := sqllock.CheckTTL(ttl); err != nil {
		return err
	}
	var err error
	for try := 0; try < 2; try++ {
		var fence int64
		err = l.d.pool.QueryRow(ctx, l.d.qRefresh, l.key, l.owner, int64(l.token), l.id, ttlMicros(ttl)).Scan(&fence)
		if errors.Is(err, pgx.ErrNoRows) {
			return errRowNotHeld
		}
		if !transportFailed(ctx, err) {
			break
		}
	}
	return failed(ctx, err)
}

// Release gives up this hold; the last one frees the row (its fence stays).
// A release whose connection broke is sent once more; if the first one did
// run, the second finds the hold gone from the caller's own tenure, which
// only a release of this hold does: success.
func (l *rowLock) Release(ctx context.Context) error {
	var err error
	for try := 0; try < 2; try++ {
		var released, gone bool
		var notified int64
		dest := []any{&released, &gone}
		if l.d.notify {
			dest = append(dest, &notified)
		}
		err = l.d.pool.QueryRow(ctx, l.d.qRelease, l.key, l.owner, int64(l.token), l.id).Scan(dest...)
		switch {
		case err == nil && (released || (try > 0 && gone)):
			return nil
		case err == nil:
			return errRowNotHeld
		}
		if !transportFailed(ctx, err) {
			break
		}
	}
	return failed(ctx, err)
}
