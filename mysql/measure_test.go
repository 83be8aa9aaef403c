package mysql_test

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMeasureRowsLeft (DISTLOCK_MEASURE_ROWS=N): N distinct short-lived
// locks (TryAcquire+Release, 16 workers), then the lease rows left, before
// and after a forced cleanup.
func TestMeasureRowsLeft(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("DISTLOCK_MEASURE_ROWS"))
	if n <= 0 {
		t.Skip("set DISTLOCK_MEASURE_ROWS")
	}
	srv := server(t)
	admin := adminDB(t, srv)
	table := uniqueTable("measure")
	ctx := ctxT(t, 20*time.Minute)
	db := openDB(t, config(t, srv))
	db.SetMaxIdleConns(32)
	l := mustNew(t, db, measureOpts(table)...)
	defer l.Close()
	var next, fails atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && time.Since(start) < 15*time.Minute; i = next.Add(1) {
				lease, err := l.TryAcquire(ctx, fmt.Sprintf("measure/%d", i))
				if err == nil {
					err = lease.Release(ctx)
				}
				if err != nil {
					if fails.Add(1) < 5 {
						t.Logf("lock %d: %v", i, err)
					}
				}
			}
		})
	}
	wg.Wait()
	var rows int
	count := func() int {
		if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+table+"` WHERE lock_key <> ''").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		return rows
	}
	t.Logf("%d locks in %v, %d failures; lease rows left: %d", n, time.Since(start).Round(time.Millisecond), fails.Load(), count())
	cstart := time.Now()
	deleted := forceCleanup(t, ctx, l)
	t.Logf("forced cleanup: deleted %d in %v; lease rows left: %d", deleted, time.Since(cstart).Round(time.Millisecond), count())
}
