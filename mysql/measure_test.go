package mysql_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/mysql"
)

// TestMeasureRowsLeft (DISTLOCK_MEASURE_ROWS=N): N distinct short-lived
// row-mode locks, then the lease rows left, before and after a forced
// cleanup (all free rows, grace 0).
func TestMeasureRowsLeft(t *testing.T) {
	n := measureN(t)
	srv := server(t)
	admin := adminDB(t, srv)
	table := uniqueTable("measure")
	ctx := ctxT(t, 20*time.Minute)
	db := openDB(t, config(t, srv))
	db.SetMaxIdleConns(32)
	l := mustNew(t, db, mysql.WithTable(table), mysql.WithCleanup(0, 0, 1))
	defer l.Close()
	sqltest.MeasureRowsLeft(t, ctx, l, n, func() int { return leaseRows(t, ctx, admin, table) }, forcedCleanup(t, ctx, l))
}

// TestMeasureForUpdateRowsLeft (DISTLOCK_MEASURE_ROWS=N): N distinct
// short-lived forupdate-mode locks, then the keys left (kind-0 rows; each
// has a kind-1 fence row too), before and after a forced cleanup (all free
// keys, grace 0).
func TestMeasureForUpdateRowsLeft(t *testing.T) {
	n := measureN(t)
	srv := server(t)
	admin := adminDB(t, srv)
	table := uniqueTable("fumeasure")
	ctx := ctxT(t, 20*time.Minute)
	db := openDB(t, config(t, srv))
	db.SetMaxIdleConns(32)
	l := fuLocker(t, db, table, mysql.WithCleanup(0, 0, 1))
	sqltest.MeasureRowsLeft(t, ctx, l, n, func() int { return fuKeys(t, ctx, admin, table) }, forcedCleanup(t, ctx, l))
	t.Logf("table rows left (floors included): %d", countRows(t, ctx, admin, table, "TRUE"))
}

// measureN is $DISTLOCK_MEASURE_ROWS; the measurement is skipped without it.
func measureN(t *testing.T) int {
	n, _ := strconv.Atoi(os.Getenv("DISTLOCK_MEASURE_ROWS"))
	if n <= 0 {
		t.Skip("set DISTLOCK_MEASURE_ROWS")
	}
	return n
}
