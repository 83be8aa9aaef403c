package redis

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/soak"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// TestFenceKeysBounded: 100,000 distinct short-lived locks (TryAcquire +
// Release each, 8 workers, the loop bounded by count and by 5 minutes) on
// an empty Redis leave at most one fencing counter per Cluster slot
// (16,384) and nothing else. Per-key counters left one key per distinct
// name: 100,000. The figure is logged.
func TestFenceKeysBounded(t *testing.T) {
	testserver.SkipShort(t, "redis (20,000 locks; 100,000 under make soak)")
	conformance.Parallel(t)
	// More locks than slots: one fence key per lock would leave more keys
	// than the bound.
	locks := soak.Scale(20_000, 100_000)
	const workers, slots = 8, 16384
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	l, err := distlock.Open(ctx, "redis://"+srv.Addr()+"/0")
	require.NoError(t, err)
	defer l.Close()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(locks) && ctx.Err() == nil; i = next.Add(1) {
				lease, err := l.TryAcquire(ctx, "bounded/"+strconv.FormatInt(i, 10), distlock.WithAutoRefresh(false))
				if err != nil {
					t.Error(err)
					return
				}
				if err := lease.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() || ctx.Err() != nil {
		t.Fatalf("did not finish: %v", ctx.Err())
	}
	n, err := admin.DBSize(ctx).Result()
	require.NoError(t, err)
	t.Logf("%d distinct locks acquired and released in %v: %d keys left in Redis", locks, time.Since(start).Round(time.Millisecond), n)
	if n > slots {
		t.Errorf("%d keys left after %d distinct locks, want at most %d (one fencing counter per slot)", n, locks, slots)
	}
}
