package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
	"github.com/stretchr/testify/require"
)

// TestReleaseAfterWakesQueuedWaiter: a lease with a one-minute TTL is
// released within its 200ms minimum hold, so ReleaseAfter moves the
// lock's expiry from ~1m to ~200ms. An Acquire already queued for the key
// set its timer to the old expiry and is never told of the new one (no
// settle runs at the shortened expiry), so it waits the whole minute while
// a TryAcquire gets the lock at once after 200ms. The queued waiter must
// get the lock when the minimum hold ends (bounded here by 10s, 50x the
// hold, well below the 1m TTL).
func TestReleaseAfterWakesQueuedWaiter(t *testing.T) {
	ns := memory.NewNamespace()
	a, b := memory.MustNew(ns), memory.MustNew(ns)
	defer a.Close()
	defer b.Close()
	ctx := t.Context()
	lease, err := a.Acquire(ctx, "job", distlock.WithTTL(time.Minute), distlock.WithMinHold(200*time.Millisecond))
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := b.Acquire(wctx, "job")
		if err == nil {
			l.Release(ctx)
		}
		got <- err
	}()
	// Wait until b is queued.
	for i := 0; ; i++ {
		info, err := a.Inspect(ctx, "job")
		require.NoError(t, err)
		if info.Waiters == 1 {
			break
		}
		if i == 2000 {
			t.Fatal("the waiter never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	require.NoError(t, lease.Release(ctx))
	if err := <-got; err != nil {
		t.Errorf("queued Acquire after a release within a 200ms minimum hold: %v after %v (the lock was free for TryAcquire from 200ms on)", err, time.Since(start).Round(time.Millisecond))
	}
}
