package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/postgres"
)

// With notify=true a row-mode waiter whose holder has a minute left, and
// whose retry policy sleeps a minute, wakes at the release (NOTIFY), not
// at the holder's expiry; a give-back of the lock wakes it the same way.
func TestNotifyWakesWaiter(t *testing.T) {
	srv := server(t)
	table := uniqueTable("notify")
	a, err := distlock.Open(ctxT(t, 30*time.Second), pgURL(srv, "mode=row&notify=true&table="+table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	if !a.Capabilities().Notify {
		t.Fatal("notify=true does not claim Notify")
	}
	// The waiter's Locker is typed, so that the test can see when it
	// watches the key.
	b := mustNew(t, openPool(t, srv, nil), postgres.WithNotify(true), postgres.WithTable(table), postgres.WithCreateTable(true))
	t.Cleanup(func() { _ = b.Close() })
	if !b.Capabilities().Notify {
		t.Fatal("WithNotify(true) does not claim Notify")
	}
	ctx := ctxT(t, 2*time.Minute)
	slow := distlock.WithRetry(distlock.Backoff{Min: time.Minute, Max: time.Minute})
	for round := 0; round < 5; round++ {
		holder, err := a.TryAcquire(ctx, "notify/key", distlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			l, err := b.Acquire(ctx, "notify/key", slow, distlock.WithTTL(time.Minute))
			at := time.Now()
			if err != nil {
				t.Error(err)
			} else {
				_ = l.Release(context.Background())
			}
			got <- at
		}()
		if !waitFor(10*time.Second, func() bool { n, listening := postgres.Watching(b, "notify/key"); return n > 0 && listening }) {
			t.Fatalf("round %d: the waiter is not watching after 10s", round)
		}
		released := time.Now()
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-got:
			if lag := at.Sub(released); lag > 2*time.Second {
				t.Errorf("round %d: waiter woke %v after the release", round, lag)
			} else {
				t.Logf("round %d: woke %v after the release", round, lag.Round(time.Microsecond))
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: waiter not woken 20s after the release", round)
		}
	}
}
