package jobs_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/assert"
)

// TestMinHoldBeyondBackendLimitRefusedUpFront: memcached cannot keep an
// item longer than 30 days (relative expiry). A minimum hold of 31 days
// was accepted at acquisition, and only Release failed (ErrInvalidTTL),
// leaving the lock to expire at its TTL: the minimum hold silently
// broken. A minimum hold the backend cannot keep must be refused when the
// lock is taken, before the job runs.
func TestMinHoldBeyondBackendLimitRefusedUpFront(t *testing.T) {
	a, _ := openTwo(t, memcachedURL(t))
	ctx := t.Context()
	lease, err := a.TryAcquire(ctx, "nightly", distlock.WithTTL(2*time.Second), distlock.WithMinHold(31*24*time.Hour))
	if err != nil {
		assert.ErrorIs(t, err, distlock.ErrInvalidOption, "TryAcquire with a 31-day minimum hold on memcached")
		return
	}
	assert.NoError(t, lease.Release(ctx), "accepted a 31-day minimum hold, then Release failed")
}
