package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/backend"
)

// Row mode's operator calls (backend.Inspector, backend.ForceReleaser):
// the lease row read, or freed whatever its owner, by the database clock.

var (
	_ backend.Inspector     = (*rowDriver)(nil)
	_ backend.ForceReleaser = (*rowDriver)(nil)
)

const (
	// rowInspectSQL reads a lease row: the last column is NULL unless it
	// is held. Arguments: key.
	rowInspectSQL = `SELECT owner, cardinality(holds), fence, metadata,
  CASE WHEN cardinality(holds) > 0 AND expires_at > clock_timestamp()
    THEN GREATEST(1, (EXTRACT(EPOCH FROM (expires_at - clock_timestamp())) * 1000000)::bigint) END
FROM %[1]s WHERE lock_key = $1`
	// rowEvictSQL frees a row whatever its owner, keeping its fence.
	// Arguments: key.
	rowEvictSQL = `UPDATE %[1]s SET holds = '{}', expires_at = 'epoch' WHERE lock_key = $1`
	// rowEvictNotifySQL wakes the key's waiters (WithNotify).
	rowEvictNotifySQL = `SELECT pg_notify(%s, encode(sha256($1::bytea), 'hex'))`
)

// readRow reads key's lease row through q: Held with owner, metadata,
// token, holds and the TTL left by the database clock; not held if the row
// is free or missing. Waiters is -1: pollers are not queued anywhere.
func (d *rowDriver) readRow(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, key, suffix string) (backend.LockInfo, error) {
	info := backend.LockInfo{Waiters: -1}
	var (
		owner, md []byte
		holds     int
		fence     int64
		remaining *int64
	)
	err := q.QueryRow(ctx, fmt.Sprintf(rowInspectSQL, d.Table)+suffix, []byte(key)).Scan(&owner, &holds, &fence, &md, &remaining)
	if errors.Is(err, pgx.ErrNoRows) {
		return info, nil
	}
	if err != nil {
		return info, failed(ctx, err)
	}
	if remaining != nil {
		info.Held, info.Owner, info.Metadata, info.Token, info.Holds = true, string(owner), string(md), uint64(fence), holds
		info.TTL = time.Duration(*remaining) * time.Microsecond
	}
	return info, nil
}

// Inspect implements backend.Inspector: one read of the lease row.
func (d *rowDriver) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	if err := d.ready(ctx); err != nil {
		return backend.LockInfo{}, err
	}
	return d.readRow(ctx, d.pool, key, "")
}

// ForceRelease implements backend.ForceReleaser: in one transaction the
// lease row is read FOR UPDATE and, if held, freed (no holds, expiry at the
// epoch, fence kept) — with WithNotify, its waiters are notified at commit
// — so what it returns is exactly the tenure it ended. The evicted holder's
// Refresh and Release match no live hold and get ErrNotHeld; the next
// acquisition starts a new tenure with fence + 1.
func (d *rowDriver) ForceRelease(ctx context.Context, key string, want backend.Holder) (backend.LockInfo, error) {
	if err := d.ready(ctx); err != nil {
		return backend.LockInfo{}, err
	}
	var info backend.LockInfo
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var err error
		if info, err = d.readRow(ctx, tx, key, " FOR UPDATE"); err != nil {
			return err
		}
		if !want.Matches(info) {
			return want.Refusal()
		}
		if !info.Held {
			return nil
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(rowEvictSQL, d.Table), []byte(key)); err != nil {
			return err
		}
		if d.notify {
			_, err = tx.Exec(ctx, fmt.Sprintf(rowEvictNotifySQL, quoteLiteral(d.Name)), []byte(key))
		}
		return err
	})
	if err != nil {
		return backend.LockInfo{}, failed(ctx, err)
	}
	return info, nil
}
