package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// With notify=true a row-mode waiter whose holder has a minute left, and
// whose retry policy sleeps a minute, wakes at the release (NOTIFY), not
// at the holder's expiry; a give-back of the lock wakes it the same way.
func TestNotifyWakesWaiter(t *testing.T) {
	srv := server(t)
	url := pgURL(srv, "mode=row&notify=true&table="+uniqueTable("notify"))
	open := func() distlock.Locker {
		l, err := distlock.Open(ctxT(t, 30*time.Second), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	a, b := open(), open()
	if !b.Capabilities().Notify {
		t.Fatal("notify=true does not claim Notify")
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
		time.Sleep(300 * time.Millisecond) // the waiter is watching
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
