package postgres_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// Nothing leaks: after Close the goroutines are back to the baseline, no
// lease row or advisory lock is held, and no session of the Lockers is left
// on the server.
func TestNoLeaks(t *testing.T) {
	srv := server(t)
	admin := openPool(t, srv, nil)
	ctx := ctxT(t, 2*time.Minute)
	sessions := func() int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := admin.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	baseSessions := sessions()
	before := runtime.NumGoroutine()
	rowTable, advTable := uniqueTable("leak_row"), uniqueTable("leak_adv")
	for _, q := range []string{"mode=row&table=" + rowTable, "mode=row&notify=true&table=" + rowTable, "mode=advisory&keepalive=100ms&table=" + advTable} {
		a, err := distlock.Open(ctx, pgURL(srv, q))
		if err != nil {
			t.Fatal(err)
		}
		b, err := distlock.Open(ctx, pgURL(srv, q))
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
	if !waitFor(10*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
	}
	if held, err := heldRows(ctx, admin, rowTable); err != nil || len(held) != 0 {
		t.Errorf("row mode: still held after Close: %q (%v)", held, err)
	}
	if held, err := heldAdvisory(ctx, admin, advTable); err != nil || len(held) != 0 {
		t.Errorf("advisory mode: still held after Close: %q (%v)", held, err)
	}
	if !waitFor(5*time.Second, func() bool { return sessions() <= baseSessions }) {
		t.Errorf("%d server sessions after Close, %d before", sessions(), baseSessions)
	}
}
