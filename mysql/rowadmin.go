package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// Row mode's operator calls (backend.Inspector, backend.ForceReleaser):
// the lease row read, or freed whatever its owner, by the database clock.

var (
	_ backend.Inspector     = (*rowDriver)(nil)
	_ backend.ForceReleaser = (*rowDriver)(nil)
)

// rowInspectSQL reads a lease row: remaining_us is NULL unless it is held.
// Arguments: hash.
const rowInspectSQL = `SELECT owner, holds, fence, metadata,
  IF(holds > 0 AND expires_at > UTC_TIMESTAMP(6), TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), NULL) AS remaining_us
FROM %[1]s WHERE key_hash = ?`

// rowEvictSQL frees a held row whatever its owner, keeping its fence (so
// the next tenure's token is higher). Arguments: hash.
const rowEvictSQL = `UPDATE %[1]s SET holds = 0, hold_ids = NULL, expires_at = ` + freeExpiry + ` WHERE key_hash = ?`

// leaseRow is a lease row as rowInspectSQL reads it.
type leaseRow struct {
	Owner     []byte        `db:"owner"`
	Holds     int           `db:"holds"`
	Fence     uint64        `db:"fence"`
	Metadata  []byte        `db:"metadata"`
	Remaining sql.NullInt64 `db:"remaining_us"`
}

// readRow reads key's lease row through q (the pool or a transaction):
// Held with owner, metadata, token, holds and the TTL left by the database
// clock; not held if the row is free or missing. Waiters is -1: pollers
// are not queued anywhere.
func (d *rowDriver) readRow(ctx context.Context, q sqlx.QueryerContext, h [32]byte, suffix string) (backend.LockInfo, error) {
	info := backend.LockInfo{Waiters: -1}
	var r leaseRow
	err := sqlx.GetContext(ctx, q, &r, fmt.Sprintf(rowInspectSQL, d.Table)+suffix, h[:])
	if errors.Is(err, sql.ErrNoRows) {
		return info, nil
	}
	if err != nil {
		return info, sqllock.Failed(ctx, err)
	}
	if r.Remaining.Valid {
		info.Held, info.Owner, info.Metadata, info.Token, info.Holds = true, string(r.Owner), string(r.Metadata), r.Fence, r.Holds
		info.TTL = time.Duration(r.Remaining.Int64) * time.Microsecond
	}
	return info, nil
}

// Inspect implements backend.Inspector: one read of the lease row.
func (d *rowDriver) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	if err := d.ready(ctx); err != nil {
		return backend.LockInfo{}, err
	}
	return d.readRow(ctx, d.x, keyHash(key), "")
}

// ForceRelease implements backend.ForceReleaser: in one transaction the
// lease row is read with an exclusive lock and, if held, freed (holds 0,
// expiry in the past, fence kept), so what it returns is exactly the tenure
// it ended. The evicted holder's Refresh and Release then match no row
// (they require a live expiry) and get ErrNotHeld; the next acquisition
// starts a new tenure with fence + 1.
func (d *rowDriver) ForceRelease(ctx context.Context, key string, want backend.Holder) (backend.LockInfo, error) {
	if err := d.ready(ctx); err != nil {
		return backend.LockInfo{}, err
	}
	h := keyHash(key)
	tx, err := d.x.BeginTxx(ctx, nil)
	if err != nil {
		return backend.LockInfo{}, sqllock.Failed(ctx, err)
	}
	defer func() { _ = tx.Rollback() }()
	info, err := d.readRow(ctx, tx, h, " FOR UPDATE")
	if err == nil && !want.Matches(info) {
		return backend.LockInfo{}, want.Refusal()
	}
	if err != nil || !info.Held {
		return info, err
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(rowEvictSQL, d.Table), h[:]); err != nil {
		return backend.LockInfo{}, sqllock.Failed(ctx, err)
	}
	if err := tx.Commit(); err != nil {
		return backend.LockInfo{}, sqllock.Failed(ctx, err)
	}
	return info, nil
}
