package mysql

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// rowBatchMax is the most locks one batched refresh statement names. Each
// takes four placeholders (the protocol allows 65,535) and, interpolated,
// about 150 bytes of SQL.
const rowBatchMax = 512

// The batched refresh: rowRefreshSQL's extension of expires_at for the rows
// of many locks of one TTL, in one statement. The plain key_hash IN (…)
// lets the optimizer read just those rows by primary key (a range of point
// lookups); the row-constructor IN then keeps exactly the tenures (owner
// and fence) of the batch, and the last conditions only rows still held.
// Its outcome is the count of changed rows (LAST_INSERT_ID cannot report
// many outcomes). Arguments: ttl µs, n hashes, n (hash, owner, fence).
const (
	rowRefreshBatchHead = `UPDATE %[1]s SET
  expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
WHERE key_hash IN (`
	rowRefreshBatchMid  = `) AND (key_hash, owner, fence) IN (`
	rowRefreshBatchTail = `) AND holds > 0 AND expires_at > UTC_TIMESTAMP(6)`
)

// Placeholder lists sliced to length: batchMarks[1:2n] is n "?", and
// batchTuples[1:8n] is n "(?,?,?)", comma-separated.
var (
	batchMarks  = strings.Repeat(",?", rowBatchMax)
	batchTuples = strings.Repeat(",(?,?,?)", rowBatchMax)
)

var _ backend.BatchRefresher = (*rowDriver)(nil)

// refreshBatchSQL is the batched refresh of n (1 to rowBatchMax) locks.
func (d *rowDriver) refreshBatchSQL(n int) string {
	return d.qBatchHead + batchMarks[1:2*n] + rowRefreshBatchMid + batchTuples[1:8*n] + rowRefreshBatchTail
}

// batchEntry is one lock of a batch: its item's index and its TTL in µs.
type batchEntry struct {
	i  int
	us int64
	l  *rowLock
}

// sameTenure reports whether a and b name the same tenure of the same row.
func sameTenure(a, b *rowLock) bool {
	return a.hash == b.hash && a.token == b.token && bytes.Equal(a.owner, b.owner)
}

// RefreshBatch implements backend.BatchRefresher with one UPDATE per
// distinct TTL (and per 512 locks). Each item gets the error its
// Lock.Refresh(ctx, item.TTL) would return: when the statement's count of
// changed rows does not prove every lock extended, its locks are refreshed
// one by one.
func (d *rowDriver) RefreshBatch(ctx context.Context, items []backend.RefreshItem) []error {
	errs := make([]error, len(items))
	entries := make([]batchEntry, 0, len(items))
	for i, it := range items {
		l, ok := it.Lock.(*rowLock)
		switch {
		case !ok || l == nil || l.d != d:
			errs[i] = fmt.Errorf("mysql: RefreshBatch item %d: %T is not a row-mode lock of this Locker", i, it.Lock)
		case it.TTL <= 0:
			errs[i] = sqllock.CheckTTL(it.TTL)
		default:
			entries = append(entries, batchEntry{i: i, us: ttlMicros(it.TTL), l: l})
		}
	}
	if len(entries) == 0 {
		return errs
	}
	// Order by TTL, then by row and tenure: each TTL's locks are
	// contiguous, named in primary key order, and repeated tenures (nested
	// holds of one owner share a fence) are adjacent.
	slices.SortFunc(entries, func(a, b batchEntry) int {
		if c := cmp.Compare(a.us, b.us); c != 0 {
			return c
		}
		if c := bytes.Compare(a.l.hash[:], b.l.hash[:]); c != 0 {
			return c
		}
		if c := cmp.Compare(a.l.token, b.l.token); c != 0 {
			return c
		}
		return bytes.Compare(a.l.owner, b.l.owner)
	})
	limit := d.batchMax
	if limit <= 0 || limit > rowBatchMax {
		limit = rowBatchMax
	}
	args := make([]any, 0, 1+4*min(len(entries), limit))
	for start := 0; start < len(entries); {
		end := start + 1
		for end < len(entries) && end-start < limit && entries[end].us == entries[start].us {
			end++
		}
		args = d.refreshGroup(ctx, items, entries[start:end], errs, args)
		start = end
	}
	return errs
}

// refreshGroup refreshes the locks of g, which share a TTL, with one
// statement, falling back to one Refresh per lock when its outcome does not
// show that every lock was refreshed. It returns args for reuse.
func (d *rowDriver) refreshGroup(ctx context.Context, items []backend.RefreshItem, g []batchEntry, errs []error, args []any) []any {
	if len(g) == 1 {
		errs[g[0].i] = g[0].l.Refresh(ctx, items[g[0].i].TTL)
		return args
	}
	if ctx.Err() != nil {
		err := sqllock.NoAnswer(ctx, nil)
		for _, e := range g {
			errs[e.i] = err
		}
		return args
	}
	n := 1
	for k := 1; k < len(g); k++ {
		if !sameTenure(g[k-1].l, g[k].l) {
			n++
		}
	}
	args = args[:1+4*n]
	args[0] = g[0].us
	j := 0
	for k, e := range g {
		if k > 0 && sameTenure(g[k-1].l, e.l) {
			continue
		}
		h := any(e.l.hash[:])
		args[1+j] = h
		t := 1 + n + 3*j
		args[t], args[t+1], args[t+2] = h, e.l.owner, e.l.token
		j++
	}
	res, err := d.db.ExecContext(ctx, d.refreshBatchSQL(n), args...)
	clear(args)
	if err == nil {
		var changed int64
		if changed, err = res.RowsAffected(); err == nil && changed == int64(n) {
			return args
		}
	}
	if err != nil && ctx.Err() != nil {
		err = sqllock.NoAnswer(ctx, err)
		for _, e := range g {
			errs[e.i] = err
		}
		return args
	}
	for _, e := range g {
		errs[e.i] = e.l.Refresh(ctx, items[e.i].TTL)
	}
	return args
}
