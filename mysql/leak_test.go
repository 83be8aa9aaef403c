package mysql_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// Nothing leaks: after Close the goroutines are back to the baseline, no
// row is held, no transaction is open and no connection of the Lockers is
// left on the server.
func TestNoLeaks(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	admin.SetMaxOpenConns(1)
	var baseConns int
	if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?", srv.User).Scan(&baseConns); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	rowTable, fuTable := uniqueTable("leak_row"), uniqueTable("leak_fu")
	ctx := ctxT(t, 2*time.Minute)
	for _, q := range []string{"mode=row&table=" + rowTable, "mode=forupdate&keepalive=100ms&table=" + fuTable} {
		a, err := distlock.Open(ctx, mysqlURL(srv, q))
		if err != nil {
			t.Fatal(err)
		}
		b, err := distlock.Open(ctx, mysqlURL(srv, q))
		if err != nil {
			t.Fatal(err)
		}
		held, err := a.TryAcquire(ctx, "leak/held", distlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.TryAcquire(ctx, "leak/held"); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatal(err)
		}
		actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		if _, err := b.Acquire(actx, "leak/held"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: cancelled Acquire: %v", q, err)
		}
		cancel()
		for i := 0; i < 20; i++ {
			lease, err := b.TryAcquire(ctx, "leak/cycle", distlock.WithOwner("o"))
			if err != nil {
				t.Fatal(err)
			}
			nested, err := b.TryAcquire(ctx, "leak/cycle", distlock.WithOwner("o"))
			if err != nil {
				t.Fatal(err)
			}
			_ = nested.Release(ctx)
			_ = lease.Release(ctx)
		}
		time.Sleep(300 * time.Millisecond) // refreshes and keepalives run
		kept, err := b.TryAcquire(ctx, "leak/kept-at-close")
		if err != nil {
			t.Fatal(err)
		}
		_ = held.Release(ctx)
		if err := a.Close(); err != nil {
			t.Error(err)
		}
		if err := b.Close(); err != nil { // releases kept
			t.Error(err)
		}
		if kept.Err() == nil {
			t.Errorf("%s: lease still held after Close", q)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
	var n int
	if err := admin.QueryRow("SELECT COUNT(*) FROM `" + rowTable + "` WHERE holds > 0 OR expires_at > UTC_TIMESTAMP(6)").Scan(&n); err != nil || n != 0 {
		t.Errorf("row mode: %d rows still held after Close (%v)", n, err)
	}
	locked, err := lockedRows(ctx, admin, fuTable)
	if err != nil || len(locked) != 0 {
		t.Errorf("forupdate: rows still locked after Close: %q (%v)", locked, err)
	}
	if n := openTrx(t, admin); n != 0 {
		t.Errorf("%d transactions open after Close", n)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?", srv.User).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n <= baseConns || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n > baseConns {
		t.Errorf("%d server connections after Close, %d before", n, baseConns)
	}
}
