package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/distlock/distlock/internal/sqllock"
)

// Row mode's fencing-record bound (sqllock.Cleanup): a pass deletes lease
// rows free for longer than the grace period and raises their buckets'
// floor rows, in one transaction, under REPEATABLE READ. A floor row's
// key_hash is never a key's SHA-256, so a lock never names one.

// floorHash is the key_hash of the floor row of the bucket of h.
func floorHash(h [32]byte) [32]byte {
	var f [32]byte
	b := sqllock.BucketOfHash(h)
	f[30], f[31] = byte(b>>8), byte(b)
	return f
}

const (
	// Arguments: grace µs, batch.
	cleanupCandidatesSQL = `SELECT key_hash FROM %[1]s
WHERE lock_key <> '' AND expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND LIMIT ?`
	cleanupFloorsSQL  = `INSERT IGNORE INTO %[1]s (key_hash, lock_key, owner, holds, expires_at, fence) VALUES `
	cleanupFloorRow   = `(?, '', '', 0, ` + freeExpiry + `, 0)`
	cleanupLockFloors = `SELECT key_hash FROM %[1]s WHERE key_hash IN (%[2]s) ORDER BY key_hash FOR UPDATE`
	// Arguments: candidates, grace µs.
	cleanupConfirmSQL = `SELECT key_hash, fence FROM %[1]s
WHERE key_hash IN (%[2]s) AND lock_key <> '' AND expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND FOR UPDATE`
	cleanupDeleteSQL = `DELETE FROM %[1]s WHERE key_hash IN (%[2]s)`
	cleanupRaiseSQL  = `UPDATE %[1]s SET fence = GREATEST(fence, CASE key_hash %[2]s END) WHERE key_hash IN (%[3]s)`
)

// ensureFloors creates the floor rows that do not exist yet, once per
// Locker, with insert (the mode's INSERT IGNORE of n floor rows): the
// acquire statement's floor read must find a row, because a locking read of
// a missing row takes a gap lock, and two acquisitions holding it would
// deadlock inserting their new rows into that gap.
func (b *base) ensureFloors(ctx context.Context, insert func(table string, n int) string) error {
	args := make([]any, sqllock.FloorBuckets)
	for i := range args {
		var f [32]byte
		f[30], f[31] = byte(i>>8), byte(i)
		args[i] = f[:]
	}
	if _, err := b.db.ExecContext(ctx, insert(b.Table, len(args)), args...); err != nil {
		return fmt.Errorf("create the fence floor rows: %w", sqllock.Failed(ctx, err))
	}
	return nil
}

// rowInsertFloors is row mode's INSERT IGNORE of n floor rows.
func rowInsertFloors(table string, n int) string {
	return fmt.Sprintf(cleanupFloorsSQL, table) + strings.Repeat(cleanupFloorRow+",", n-1) + cleanupFloorRow
}

// cleanupPass is row mode's sqllock.Pass.
func (d *rowDriver) cleanupPass(ctx context.Context, grace time.Duration, batch int) (int, error) {
	var cands [][]byte
	if err := sqlx.SelectContext(ctx, d.x, &cands, fmt.Sprintf(cleanupCandidatesSQL, d.Table), ttlMicros(grace), batch); err != nil || len(cands) == 0 {
		return 0, err
	}
	fl := sortedFloors(cands)
	// The floor rows exist before they are locked (a locking read of a
	// missing row would take a gap lock); ensureFloors created them, but
	// someone may have deleted some.
	if _, err := d.db.ExecContext(ctx, rowInsertFloors(d.Table, len(fl)), fl...); err != nil {
		return 0, err
	}
	tx, err := d.x.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(cleanupLockFloors, d.Table, marks(len(fl))), fl...); err != nil {
		return 0, err
	}
	args := anys(cands)
	return d.deleteAndRaise(ctx, tx, fmt.Sprintf(cleanupConfirmSQL, d.Table, marks(len(cands))), append(args, ttlMicros(grace)), cleanupDeleteSQL, cleanupRaiseSQL)
}

// fenceRow is a row's key hash and fence, as a cleanup's confirming read
// returns them.
type fenceRow struct {
	Hash  []byte `db:"key_hash"`
	Fence uint64 `db:"fence"`
}

// deleteAndRaise ends a cleanup pass in tx, which holds the floor rows
// locked: confirm (a locking read of key_hash, fence) names the rows to
// delete; del (table, marks) deletes them and raise (table, cases, marks)
// raises each floor to at least their fences; then it commits and returns
// how many keys went.
func (b *base) deleteAndRaise(ctx context.Context, tx *sqlx.Tx, confirm string, args []any, del, raise string) (int, error) {
	var rows []fenceRow
	if err := tx.SelectContext(ctx, &rows, confirm, args...); err != nil {
		return 0, err
	}
	floors := map[[32]byte]uint64{}
	gone := make([]any, len(rows))
	for i, r := range rows {
		gone[i] = r.Hash
		f := floorHash([32]byte(r.Hash))
		floors[f] = max(floors[f], r.Fence)
	}
	if len(gone) == 0 {
		return 0, tx.Commit()
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(del, b.Table, marks(len(gone))), gone...); err != nil {
		return 0, err
	}
	var cases strings.Builder
	var cargs, in []any
	for f, fence := range floors {
		cases.WriteString("WHEN ? THEN ? ")
		cargs = append(cargs, f[:], fence)
		in = append(in, f[:])
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(raise, b.Table, cases.String(), marks(len(in))), append(cargs, in...)...); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return len(gone), nil
}

// marks is n comma-separated placeholders.
func marks(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }
