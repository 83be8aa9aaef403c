package election_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestMinHoldSessionBoundCloseLeavesNothing: on a session-bound backend a
// lease released within its minimum hold is released later by the Locker;
// Close frees it at once (documented). Close must also end that work: no
// goroutine of the Locker is left (bounded wait), and the lock is free for
// another client right after.
func TestMinHoldSessionBoundCloseLeavesNothing(t *testing.T) {
	url := zkURL(t)
	other := open(t, url)
	if _, err := other.Inspect(t.Context(), "job"); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	l, err := distlock.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		lease, err := l.TryAcquire(t.Context(), "job"+string(rune('a'+i)), distlock.WithMinHold(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if g := settleGoroutines(base); g > base {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before Open:\n%s", g, base, buf[:runtime.Stack(buf, true)])
	}
	lease, err := other.TryAcquire(t.Context(), "joba")
	if err != nil {
		t.Fatalf("after Close within the minimum hold: %v, want the lock free", err)
	}
	lease.Release(t.Context())
}
