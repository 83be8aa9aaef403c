package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestBlockedObserverHoldsNoWakeUp: an Election observer and a waiter of
// one redlock Locker watch the same lock; the observer, whose reader does
// not read its channel, sits blocked on its send, registered ahead of the
// waiter. The holder's release must still wake the waiter (its ctx ends
// after 20s; the TTL and retry delay are a minute).
//
// It failed when redlock's Watch served waiters and observers alike, and
// the node Subscribers woke only the head of the queue — the blocked
// observer. Waiters now watch through WatchHeld (the queue), observers
// through Watch (redissub.WatchAllRank: every release, never the head).
func TestBlockedObserverHoldsNoWakeUp(t *testing.T) {
	c := startCluster(t, 3)
	// A generous node timeout: this test is about the wake-up, and under a
	// loaded -race run the default 50ms failed the holder's TryAcquire on
	// every node.
	nt := WithNodeTimeout(slack.D(time.Second))
	holders := newTestLocker(t, c.addrs(), nt)
	l := newTestLocker(t, c.addrs(), nt)
	ctx := tctx(t, 2*time.Minute)
	slow := distlock.WithRetry(distlock.Backoff{Min: time.Minute, Max: time.Minute})
	long := distlock.WithTTL(time.Minute)
	const key = "lostwake/observer"

	h, err := holders.TryAcquire(ctx, key, long)
	if err != nil {
		t.Fatal(err)
	}
	observer, err := distlock.NewElection(l, key, "observer", distlock.WithObserveInterval(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_ = observer.Observe(ctx) // never read: its buffer takes the first look, the next send blocks
	time.Sleep(500 * time.Millisecond)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // woken, the observer arms again, sees the lock free and blocks sending that
	if h, err = holders.TryAcquire(ctx, key, long); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		w, err := l.Acquire(wctx, key, slow, long)
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(500 * time.Millisecond) // the waiter attempts, subscribes, attempts again
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter not woken: the release's wake-up went to the blocked observer: %v", err)
	}
}
