package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
)

// Forupdate mode's fencing-record bound (sqllock.Cleanup). A pass deletes
// the two rows of keys granted longer than the grace ago and not held, and
// raises their buckets' floor rows to at least their fences, in one
// transaction: a key's tokens stay strictly increasing across deletions.

// fuFloorKind is the kind of a floor row.
const fuFloorKind = 2

const (
	fuFloorsSQL = `INSERT IGNORE INTO %[1]s (key_hash, kind, lock_key, fence) VALUES `
	fuFloorRow  = `(?, 2, '', 0)`
	// Arguments: start hash, grace µs, batch. The second query takes the
	// keys below a random start, so held keys do not hide the rest.
	fuCandidatesSQL = `SELECT key_hash FROM %[1]s
WHERE kind = 1 AND key_hash %[2]s ? AND (granted_at IS NULL OR granted_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)
ORDER BY key_hash LIMIT ?`
	fuLockFloorsSQL = `SELECT key_hash FROM %[1]s WHERE kind = 2 AND key_hash IN (%[2]s) ORDER BY key_hash FOR UPDATE`
	// Arguments: candidates, batch.
	fuSkipLockedSQL = `SELECT key_hash FROM %[1]s WHERE kind = 0 AND key_hash IN (%[2]s) LIMIT ? FOR UPDATE SKIP LOCKED`
	// Arguments: keys, grace µs.
	fuConfirmSQL = `SELECT key_hash, fence FROM %[1]s
WHERE kind = 1 AND key_hash IN (%[2]s) AND (granted_at IS NULL OR granted_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND) FOR UPDATE`
	fuDeleteSQL = `DELETE FROM %[1]s WHERE kind IN (0, 1) AND key_hash IN (%[2]s)`
	fuRaiseSQL  = `UPDATE %[1]s SET fence = GREATEST(fence, CASE key_hash %[2]s END) WHERE kind = 2 AND key_hash IN (%[3]s)`
)

// fuInsertFloors is forupdate mode's INSERT IGNORE of n floor rows.
func fuInsertFloors(table string, n int) string {
	return fmt.Sprintf(fuFloorsSQL, table) + strings.Repeat(fuFloorRow+",", n-1) + fuFloorRow
}

// fuCandidates returns at most batch keys last granted longer than grace
// ago, from a random point of the key space on.
func (d *fuDriver) fuCandidates(ctx context.Context, grace time.Duration, batch int) ([][]byte, error) {
	start := make([]byte, 32)
	_, _ = rand.Read(start)
	var cands [][]byte
	for _, op := range []string{">=", "<"} {
		var part [][]byte
		if err := sqlx.SelectContext(ctx, d.x, &part, fmt.Sprintf(fuCandidatesSQL, d.Table, op), start, ttlMicros(grace), batch-len(cands)); err != nil {
			return nil, err
		}
		if cands = append(cands, part...); len(cands) >= batch {
			break
		}
	}
	return cands, nil
}

// cleanupPass is forupdate mode's sqllock.Pass: it reports the keys whose
// rows it deleted.
func (d *fuDriver) cleanupPass(ctx context.Context, grace time.Duration, batch int) (int, error) {
	// Twice the batch: held keys (which the pass cannot tell from free
	// ones before it tries their rows) do not end a run early.
	cands, err := d.fuCandidates(ctx, grace, 2*batch)
	if err != nil || len(cands) == 0 {
		return 0, err
	}
	fl := sortedFloors(cands)
	if _, err := d.db.ExecContext(ctx, fuInsertFloors(d.Table, len(fl)), fl...); err != nil {
		return 0, err
	}
	tx, err := d.x.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(fuLockFloorsSQL, d.Table, marks(len(fl))), fl...); err != nil {
		return 0, err
	}
	var free [][]byte
	if err := tx.SelectContext(ctx, &free, fmt.Sprintf(fuSkipLockedSQL, d.Table, marks(len(cands))), append(anys(cands), batch)...); err != nil || len(free) == 0 {
		return 0, err
	}
	return d.deleteAndRaise(ctx, tx, fmt.Sprintf(fuConfirmSQL, d.Table, marks(len(free))), append(anys(free), ttlMicros(grace)), fuDeleteSQL, fuRaiseSQL)
}

// sortedFloors returns the distinct floor hashes of the key hashes hs, in
// key order (the order every pass locks them in).
func sortedFloors(hs [][]byte) []any {
	floors := map[[32]byte]bool{}
	for _, h := range hs {
		floors[floorHash([32]byte(h))] = true
	}
	keys := make([][32]byte, 0, len(floors))
	for f := range floors {
		keys = append(keys, f)
	}
	slices.SortFunc(keys, func(a, b [32]byte) int { return strings.Compare(string(a[:]), string(b[:])) })
	out := make([]any, len(keys))
	for i, f := range keys {
		out[i] = f[:]
	}
	return out
}

func anys(hs [][]byte) []any {
	out := make([]any, len(hs))
	for i, h := range hs {
		out[i] = h
	}
	return out
}
