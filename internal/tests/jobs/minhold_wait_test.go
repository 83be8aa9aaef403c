package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/require"
)

// TestMinHoldCountsFromGrantAfterWait: Do waits for a lock another host
// holds, then runs a short job with a minimum hold. The hold must count
// from when the lock was granted: on backends that wait natively
// (ZooKeeper, MySQL forupdate, PostgreSQL advisory: backend.Blocker) it
// counted from the start of the wait, so a job that waited longer than
// its minimum hold released the lock at once, and a host whose timer
// fired a moment later ran it again.
func TestMinHoldCountsFromGrantAfterWait(t *testing.T) {
	for _, b := range everyBackend {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel() // a namespace of its own: it only sleeps beside the others
			a, other := openTwo(t, b.url(t))
			ctx := t.Context()
			const ttl, hold, busy = 2 * time.Second, 2 * time.Second, 3 * time.Second
			first, err := other.TryAcquire(ctx, "nightly", distlock.WithTTL(ttl))
			require.NoError(t, err)
			go func() {
				time.Sleep(busy) // longer than the minimum hold
				_ = first.Release(context.Background())
			}()
			err = a.Do(ctx, "nightly", func(context.Context) error { return nil },
				distlock.WithTTL(ttl), distlock.WithMinHold(hold))
			require.NoError(t, err)
			granted := time.Now() // the grant came before Do returned
			ran, err := other.TryDo(ctx, "nightly", func(context.Context) error { return nil }, distlock.WithTTL(ttl))
			if elapsed := time.Since(granted); elapsed < hold && (ran || err != nil) {
				t.Errorf("a late host %v after a job that waited %v: ran %v, %v; want skipped within the %v minimum hold", elapsed, busy, ran, err, hold)
			}
		})
	}
}
