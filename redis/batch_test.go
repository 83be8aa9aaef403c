package redis

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBatchRefresh: many leases refreshed in one pipeline — one round
// trip — with per-lease results, and the NOSCRIPT fallback.
func TestBatchRefresh(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	counter := &pipelineCounter{}
	l.client.AddHook(counter)
	ctx := tctx(t, time.Minute)
	const n = 50
	items := make([]backend.RefreshItem, n)
	for i := range items {
		lk, err := l.d.TryAcquire(ctx, backend.Request{Key: fmt.Sprintf("batch/%d", i), Owner: "o" + strconv.Itoa(i), TTL: 2 * time.Second})
		require.NoError(t, err)
		items[i] = backend.RefreshItem{Lock: lk, TTL: time.Minute}
	}
	// One lock lost meanwhile (deleted behind its holder's back).
	lost := 7
	require.NoError(t, admin.Del(ctx, items[lost].Lock.(*lock).keys.Lock).Err())
	// Warm up: load the refresh script and dial the pipeline connection.
	require.NoError(t, items[0].Lock.Refresh(ctx, time.Minute))
	_ = l.d.RefreshBatch(ctx, items[:2])
	counter.single.Store(0)
	counter.pipelines.Store(0)
	counter.piped.Store(0)
	evalsha := commandCalls(t, admin, "evalsha")
	errs := l.d.RefreshBatch(ctx, items)
	if p, s, c := counter.pipelines.Load(), counter.single.Load(), counter.piped.Load(); p != 1 || s != 0 || c != n {
		t.Errorf("refresh of %d leases: %d pipelines with %d commands and %d single commands, want 1 pipeline of %d", n, p, c, s, n)
	}
	if got := commandCalls(t, admin, "evalsha") - evalsha; got != n {
		t.Errorf("INFO commandstats: %d EVALSHA, want %d", got, n)
	}
	for i, err := range errs {
		if i == lost {
			assert.ErrorIs(t, err, backend.ErrNotHeld, "lost lock in the batch")
			continue
		}
		assert.NoError(t, err, "item %d", i)
		if pttl := admin.PTTL(ctx, items[i].Lock.(*lock).keys.Lock).Val(); pttl < 50*time.Second {
			t.Errorf("item %d: PTTL %v after a refresh to 1m", i, pttl)
		}
	}
	assert.Equal(t, int64(0), admin.Exists(ctx, items[lost].Lock.(*lock).keys.Lock).Val(), "refresh of a lost lock recreated it")

	// After SCRIPT FLUSH: EVALSHA gets NOSCRIPT, one more pipeline with EVAL.
	require.NoError(t, admin.ScriptFlush(ctx).Err())
	counter.pipelines.Store(0)
	errs = l.d.RefreshBatch(ctx, items)
	if p := counter.pipelines.Load(); p != 2 {
		t.Errorf("after SCRIPT FLUSH: %d pipelines, want 2 (EVALSHA, then EVAL for NOSCRIPT)", p)
	}
	for i, err := range errs {
		if (i == lost) != (err != nil) {
			t.Errorf("after SCRIPT FLUSH, item %d: %v", i, err)
		}
	}
	// Single operations fall back too.
	require.NoError(t, admin.ScriptFlush(ctx).Err())
	lease, err := l.TryAcquire(ctx, "batch/noscript")
	require.NoError(t, err, "acquire after SCRIPT FLUSH")
	require.NoError(t, lease.Release(ctx), "release after SCRIPT FLUSH")
}

// TestAutoRefreshBatches: leases granted together are refreshed together
// by distlock's scheduler through RefreshBatch. The TTL only sets the
// refresh cadence (about ttl/3); it is long enough that a scheduler stall
// of a loaded machine does not outlast a lease's validity between two
// refreshes, which would end the lease, not test batching.
func TestAutoRefreshBatches(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	counter := &pipelineCounter{}
	l.client.AddHook(counter)
	ctx := tctx(t, time.Minute)
	const n = 40
	var leases []*distlock.Lease
	for i := range n {
		lease, err := l.TryAcquire(ctx, fmt.Sprintf("auto/%d", i), distlock.WithTTL(3*time.Second))
		require.NoError(t, err)
		leases = append(leases, lease)
	}
	piped := counter.piped.Load()
	// Two refresh rounds of every lease, carried in pipelines.
	eventually(t, 20*time.Second, "two rounds of refreshes in pipelines", func() bool { return counter.piped.Load()-piped >= 2*n })
	for _, lease := range leases {
		require.NoError(t, lease.Err(), "auto-refreshed lease ended")
		require.NoError(t, lease.Release(ctx))
	}
	t.Logf("%d leases: %d pipelines carrying %d commands", n, counter.pipelines.Load(), counter.piped.Load())
}
