package election_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/require"
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
	require.NoError(t, err)
	for i := range 20 {
		lease, err := l.TryAcquire(t.Context(), "job"+string(rune('a'+i)), distlock.WithMinHold(time.Minute))
		require.NoError(t, err)
		require.NoError(t, lease.Release(t.Context()))
	}
	require.NoError(t, l.Close())
	if g := settleGoroutines(base); g > base {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before Open:\n%s", g, base, buf[:runtime.Stack(buf, true)])
	}
	lease, err := other.TryAcquire(t.Context(), "joba")
	require.NoError(t, err, "after Close within the minimum hold: %v, want the lock free", err)
	lease.Release(t.Context())
}
