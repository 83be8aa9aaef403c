package jobs_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMinHoldReleaseAfterLossLeavesNewOwner: a lease with a minimum hold
// loses its lock (an operator's ForceRelease) and another owner takes it;
// the first lease's Release within its minimum hold must report
// ErrLockLost and leave the new owner's lock exactly as it was (its
// minimum-hold refresh is owner-checked, and must not stretch the new
// owner's expiry either).
func TestMinHoldReleaseAfterLossLeavesNewOwner(t *testing.T) {
	for _, b := range expiringBackends {
		t.Run(b.name, func(t *testing.T) {
			a, other := openTwo(t, b.url(t))
			ctx := t.Context()
			first, err := a.TryAcquire(ctx, "nightly", distlock.WithTTL(3*time.Second), distlock.WithMinHold(time.Hour))
			require.NoError(t, err)
			if _, err := other.ForceRelease(ctx, "nightly"); err != nil {
				t.Fatal(err)
			}
			second, err := other.TryAcquire(ctx, "nightly", distlock.WithTTL(3*time.Second), distlock.WithAutoRefresh(false))
			require.NoError(t, err)
			before, err := other.Inspect(ctx, "nightly")
			require.NoError(t, err)
			assert.ErrorIs(t, first.Release(ctx), distlock.ErrLockLost, "Release of the evicted lease")
			after, err := other.Inspect(ctx, "nightly")
			require.NoError(t, err)
			if after.Owner != second.Owner() || after.Token != before.Token || after.TTL > before.TTL {
				t.Errorf("new owner's lock changed by the old lease's Release: before %+v, after %+v", before, after)
			}
			assert.NoError(t, second.Release(ctx), "new owner's Release")
		})
	}
}
