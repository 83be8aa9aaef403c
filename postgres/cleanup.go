package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/internal/sqllock"
)

// Row mode's fencing-record bound (sqllock.Cleanup): a pass deletes lease
// rows free for longer than the grace period and raises their buckets'
// floor rows, in one transaction holding the table in SHARE ROW EXCLUSIVE
// mode. A floor row's key is never valid UTF-8, so never a lock's key.

// floorPrefix starts the key of a floor row.
const floorPrefix = "\xff\xfe"

// floorKey is the lock_key of the floor row of key's bucket.
func floorKey(key string) []byte {
	b := sqllock.Bucket(key)
	return []byte{floorPrefix[0], floorPrefix[1], byte(b >> 8), byte(b)}
}

const (
	// Arguments: grace µs, batch. Floor rows sort after every valid
	// UTF-8 key.
	cleanupCandidatesSQL = `SELECT lock_key FROM %[1]s
WHERE lock_key < '\xff'::bytea AND expires_at < clock_timestamp() - $1::bigint * interval '1 microsecond' LIMIT $2`
	cleanupLockSQL = `LOCK TABLE %[1]s IN SHARE ROW EXCLUSIVE MODE`
	// Arguments: candidates, grace µs.
	cleanupDeleteSQL = `DELETE FROM %[1]s
WHERE lock_key = ANY($1::bytea[]) AND expires_at < clock_timestamp() - $2::bigint * interval '1 microsecond'
RETURNING lock_key, fence`
	// Arguments: floor keys, fences.
	cleanupRaiseSQL = `INSERT INTO %[1]s AS l (lock_key, owner, holds, expires_at, fence)
SELECT k, '', '{}', 'epoch', f FROM unnest($1::bytea[], $2::bigint[]) AS v(k, f)
ON CONFLICT (lock_key) DO UPDATE SET fence = GREATEST(l.fence, EXCLUDED.fence)`
	// cleanupLockTimeout bounds the wait for the table lock.
	cleanupLockTimeout = "SET LOCAL lock_timeout = '2s'"
)

// cleanupPass is row mode's sqllock.Pass.
func (d *rowDriver) cleanupPass(ctx context.Context, grace time.Duration, batch int) (int, error) {
	us := ttlMicros(grace)
	rows, err := d.pool.Query(ctx, fmt.Sprintf(cleanupCandidatesSQL, d.Table), us, batch)
	if err != nil {
		return 0, err
	}
	cands, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil || len(cands) == 0 {
		return 0, err
	}
	deleted := 0
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, cleanupLockTimeout); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(cleanupLockSQL, d.Table)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, fmt.Sprintf(cleanupDeleteSQL, d.Table), cands, us)
		if err != nil {
			return err
		}
		raise := map[string]int64{}
		var key []byte
		var fence int64
		if _, err := pgx.ForEachRow(rows, []any{&key, &fence}, func() error {
			deleted++
			f := string(floorKey(string(key)))
			raise[f] = max(raise[f], fence)
			return nil
		}); err != nil {
			return err
		}
		if deleted == 0 {
			return nil
		}
		keys := make([][]byte, 0, len(raise))
		fences := make([]int64, 0, len(raise))
		for k, f := range raise {
			keys, fences = append(keys, []byte(k)), append(fences, f)
		}
		_, err = tx.Exec(ctx, fmt.Sprintf(cleanupRaiseSQL, d.Table), keys, fences)
		return err
	})
	if err != nil {
		return 0, failed(ctx, err)
	}
	return deleted, nil
}
