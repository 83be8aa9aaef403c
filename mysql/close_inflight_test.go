package mysql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestCloseWithRequestInFlightLeavesNoLock: an acquisition times out while
// its statement is still on its way to the server (the request is
// delayed), and the Locker is closed right after (a service shutting down
// after the timeout). The statement lands after Close began. The
// background give-back of the ambiguous acquisition must still find its
// hold: Close must not leave a lock that blocks every other owner for its
// 10-minute TTL. (The undo ran on Base.life, which Shutdown cancels first:
// its only try came before the statement landed.)
func TestCloseWithRequestInFlightLeavesNoLock(t *testing.T) {
	p, l, other := proxiedPair(t, "closeinflight")
	ctx := ctxT(t, time.Minute)
	const key = "close-in-flight"
	warm, err := l.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}

	const delay, timeout = 600 * time.Millisecond, 200 * time.Millisecond
	p.DelayRequests(delay)
	heal := time.AfterFunc(timeout*3/4, p.Heal)
	defer heal.Stop()
	actx, cancel := context.WithTimeout(ctx, timeout)
	_, err = l.TryAcquire(actx, key, distlock.WithTTL(10*time.Minute))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire with its request in flight: %v, want the ctx error", err)
	}
	start := time.Now()
	if err := l.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
	t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
	landed := false
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && !landed; time.Sleep(10 * time.Millisecond) {
		info, err := other.Inspect(ctx, key)
		landed = err == nil && info.Held
	}
	t.Logf("lost statement seen holding the lock: %v", landed)
	// Within the bounded cleanup (10s), another owner gets the lock.
	deadline := time.Now().Add(10 * time.Second)
	for {
		lease, err := other.TryAcquire(ctx, key)
		if err == nil {
			_ = lease.Release(ctx)
			return
		}
		if time.Now().After(deadline) {
			info, _ := other.Inspect(ctx, key)
			t.Fatalf("10s after Close, the lost statement's lock (TTL 10m) is still held: %v (%+v)", err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
