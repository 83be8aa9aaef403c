package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMinHoldSurvivesCloseOnExpiringBackends: a process shuts down (Close
// of its Locker, as on SIGTERM) while a job with a minimum hold still
// runs. On an Expiring backend the minimum hold needs no live process
// (WithMinHold: "The lock then expires on the server"), yet Close
// released the lock at once, and a host whose timer fires a moment later
// ran the job again.
func TestMinHoldSurvivesCloseOnExpiringBackends(t *testing.T) {
	for _, b := range expiringBackends {
		t.Run(b.name, func(t *testing.T) {
			a, other := openTwo(t, b.url(t))
			ctx := t.Context()
			lease, err := a.TryAcquire(ctx, "nightly", distlock.WithTTL(2*time.Second), distlock.WithMinHold(time.Minute))
			require.NoError(t, err)
			require.NoError(t, a.Close())
			assert.ErrorIs(t, lease.Err(), distlock.ErrClosed, "lease after Close")
			ran, err := other.TryDo(ctx, "nightly", func(context.Context) error { return nil }, distlock.WithTTL(2*time.Second))
			if ran || err != nil {
				t.Errorf("another host right after Close within a one-minute minimum hold: ran %v, %v; want skipped", ran, err)
			}
		})
	}
}
