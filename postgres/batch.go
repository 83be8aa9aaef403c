package postgres

import (
	"context"
	"fmt"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// rowRefreshBatchSQL is rowRefreshSQL for many holds in one statement: the
// holds arrive as parallel arrays (unnested into rows), each row is matched
// by primary key, owner, fence and request id, and the statement returns the
// index of every hold it extended. Arguments: indexes, keys, owners, fences,
// request ids, ttls µs.
const rowRefreshBatchSQL = `UPDATE %[1]s AS l
SET expires_at = GREATEST(l.expires_at, clock_timestamp() + v.us * interval '1 microsecond')
FROM unnest($1::int[], $2::bytea[], $3::bytea[], $4::bigint[], $5::bytea[], $6::bigint[]) AS v(i, k, o, f, id, us)
WHERE l.lock_key = v.k AND l.owner = v.o AND l.fence = v.f AND v.id = ANY(l.holds) AND l.expires_at > clock_timestamp()
RETURNING v.i`

var _ backend.BatchRefresher = (*rowDriver)(nil)

// RefreshBatch implements backend.BatchRefresher with one UPDATE … FROM
// unnest(…) statement. Each item gets the error its Lock.Refresh(ctx,
// item.TTL) would return: items the statement did not report extended are
// refreshed one by one.
func (d *rowDriver) RefreshBatch(ctx context.Context, items []backend.RefreshItem) []error {
	errs := make([]error, len(items))
	var (
		idx                 []int32
		keys, owners, ids   [][]byte
		fences, us          []int64
		seen                = map[string]bool{}
		answered            = make([]bool, len(items))
		anyValid, inBatched bool
	)
	for i, it := range items {
		l, ok := it.Lock.(*rowLock)
		switch {
		case !ok || l == nil || l.d != d:
			errs[i], answered[i] = fmt.Errorf("postgres: RefreshBatch item %d: %T is not a row-mode lock of this Locker", i, it.Lock), true
			continue
		case it.TTL <= 0:
			errs[i], answered[i] = sqllock.CheckTTL(it.TTL), true
			continue
		}
		anyValid = true
		if seen[string(l.key)] {
			continue // refreshed on its own below
		}
		seen[string(l.key)] = true
		inBatched = true
		idx = append(idx, int32(i))
		keys, owners, ids = append(keys, l.key), append(owners, l.owner), append(ids, l.id)
		fences, us = append(fences, int64(l.token)), append(us, ttlMicros(it.TTL))
	}
	if !anyValid {
		return errs
	}
	if inBatched && len(idx) > 1 {
		rows, err := d.pool.Query(ctx, d.qBatch, idx, keys, owners, fences, ids, us)
		if err == nil {
			for rows.Next() {
				var i int32
				if rows.Scan(&i) == nil && int(i) >= 0 && int(i) < len(items) {
					answered[i] = true
				}
			}
			rows.Close()
			err = rows.Err()
		}
		if err != nil {
			for _, i := range idx {
				answered[i] = false
			}
		}
	}
	for i := range items {
		if answered[i] {
			continue
		}
		if ctx.Err() != nil {
			errs[i] = sqllock.NoAnswer(ctx, nil)
			continue
		}
		errs[i] = items[i].Lock.Refresh(ctx, items[i].TTL)
	}
	return errs
}
