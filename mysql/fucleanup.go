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

// Forupdate mode's fencing-record bound (sqllock.Cleanup). A key has two
// rows: kind 0, locked FOR UPDATE by the holder, and kind 1, its fence and
// holder record, whose granted_at the grant statement sets (no extra round
// trip). The floors are 1,024 rows of kind 2 in the same table (key_hash:
// floorHash, lock_key empty, fence the floor). A pass, in one REPEATABLE
// READ transaction:
//
//  1. locks the floor rows of its candidates' buckets FOR UPDATE, in key
//     order (the grant statement reads its floor with a shared lock, so a
//     grant in flight finishes first and later ones wait);
//  2. locks at most a batch of the candidates' kind-0 rows FOR UPDATE SKIP
//     LOCKED (it takes twice a batch of candidates): a held lock's row is
//     locked by its holder and skipped, and no one can take the ones it
//     got until it commits;
//  3. re-reads their kind-1 rows FOR UPDATE, keeping those last granted
//     longer than the grace ago;
//  4. deletes both rows of those keys and raises each floor to at least
//     their fences; commits.
//
// Why a racing acquisition cannot reuse a token: an acquisition issues its
// token only while it holds the kind-0 row lock. If it held it before the
// pass, the pass skipped the key. Otherwise it waits for the pass's lock
// (or, TryAcquire, reports the lock busy), then finds the row gone and
// recreates it; its grant statement then reads the floor the pass raised
// and committed, and a new kind-1 row starts at floor + 1.

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
