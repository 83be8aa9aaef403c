package sqltest

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// NoLeaks runs, for each URL, the scenario after which nothing may be left
// behind: two Lockers, a held lock, a busy TryAcquire, an Acquire cut by
// its ctx, nested acquisitions released in a loop, a lease still held at
// Close. Then it checks that the goroutines are back to the baseline; the
// caller checks what the server holds.
func NoLeaks(t *testing.T, ctx context.Context, urls []string) {
	t.Helper()
	before := runtime.NumGoroutine()
	for _, u := range urls {
		leakRound(t, ctx, u)
	}
	if !Until(10*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
	}
}

func leakRound(t *testing.T, ctx context.Context, u string) {
	t.Helper()
	a, err := distlock.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	b, err := distlock.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	// Released below; its TTL only has to outlast a loaded grant.
	held, err := a.TryAcquire(ctx, "leak/held", distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, "leak/held"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if _, err := b.Acquire(actx, "leak/held"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%s: cancelled Acquire: %v", u, err)
	}
	cancel()
	for range 20 {
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
	time.Sleep(300 * time.Millisecond) // the scenario: refreshes and keepalives run
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
		t.Errorf("%s: lease still held after Close", u)
	}
}
