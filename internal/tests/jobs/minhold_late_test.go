package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/require"
)

// TestTryDoMinHoldEveryBackend: host a runs a short job with TryDo and a
// minimum hold; host b's timer fires 100ms later and skips it; the lock is
// not free before the minimum hold has passed, and is free (bounded wait)
// after. The hold is longer than the TTL, so on Expiring backends the
// release within the hold must keep the lock beyond the lease's TTL.
func TestTryDoMinHoldEveryBackend(t *testing.T) {
	for _, b := range everyBackend {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel() // a namespace of its own: it only sleeps beside the others
			a, other := openTwo(t, b.url(t))
			ctx := t.Context()
			const ttl, hold = 2 * time.Second, 4 * time.Second // whole seconds: memcached
			start := time.Now()
			ran, err := a.TryDo(ctx, "nightly", func(context.Context) error { return nil },
				distlock.WithTTL(ttl), distlock.WithMinHold(hold))
			if !ran || err != nil {
				t.Fatalf("TryDo on a free lock: ran %v, %v", ran, err)
			}
			time.Sleep(100 * time.Millisecond)
			ran, err = other.TryDo(ctx, "nightly", func(context.Context) error { return errors.New("ran twice") }, distlock.WithTTL(ttl))
			if ran || err != nil {
				t.Errorf("late timer %v after the job: ran %v, %v; want skipped", time.Since(start), ran, err)
			}
			for deadline := start.Add(hold + 20*time.Second); ; time.Sleep(50 * time.Millisecond) {
				lease, err := other.TryAcquire(ctx, "nightly", distlock.WithTTL(ttl))
				if err == nil {
					if elapsed := time.Since(start); elapsed < hold {
						t.Errorf("lock free %v after the acquisition, within the %v minimum hold", elapsed, hold)
					}
					_ = lease.Release(ctx)
					return
				}
				require.ErrorIs(t, err, distlock.ErrNotAcquired, "TryAcquire")
				if time.Now().After(deadline) {
					t.Fatalf("lock still taken %v after the acquisition, %v minimum hold", time.Since(start), hold)
				}
			}
		})
	}
}

// TestMinHoldJobOutlivesTTL: a job runs longer than its TTL (auto-refresh
// keeps the lease) but shorter than its minimum hold, on Expiring
// backends; the lock is not free before the minimum hold has passed.
func TestMinHoldJobOutlivesTTL(t *testing.T) {
	for _, b := range expiringBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel() // a namespace of its own: it only sleeps beside the others
			a, other := openTwo(t, b.url(t))
			ctx := t.Context()
			const ttl, job, hold = 2 * time.Second, 3 * time.Second, 5 * time.Second
			start := time.Now()
			ran, err := a.TryDo(ctx, "nightly", func(ctx context.Context) error {
				time.Sleep(job)
				return ctx.Err()
			}, distlock.WithTTL(ttl), distlock.WithMinHold(hold))
			if !ran || err != nil {
				t.Fatalf("TryDo: ran %v, %v", ran, err)
			}
			for ; time.Since(start) < hold; time.Sleep(50 * time.Millisecond) {
				lease, err := other.TryAcquire(ctx, "nightly", distlock.WithTTL(ttl))
				if err == nil {
					if elapsed := time.Since(start); elapsed < hold {
						t.Fatalf("lock free %v after the acquisition, within the %v minimum hold (job %v, TTL %v)", elapsed, hold, job, ttl)
					}
					_ = lease.Release(ctx)
				}
			}
		})
	}
}
