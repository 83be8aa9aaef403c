package redis

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pauseServer stops the server from processing commands for d (CLIENT
// PAUSE ALL): a request sent meanwhile stays in flight and the next ones
// queue behind it.
func pauseServer(t *testing.T, admin *goredis.Client, d time.Duration) {
	t.Helper()
	require.NoError(t, admin.Do(t.Context(), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err())
}

// TestCancelledQueuedAcquireNeverSent: an acquisition whose ctx ends while
// it waits behind another request of its Locker is never sent, and nothing
// is sent to undo it: the server runs exactly the one script in flight.
func TestCancelledQueuedAcquireNeverSent(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, time.Minute)
	warm, err := l.TryAcquire(ctx, "warm-up") // loads the scripts
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))
	require.NoError(t, admin.ConfigResetStat(ctx).Err())
	rt0, _ := l.d.batch.Stats()
	pauseServer(t, admin, 2*time.Second)
	first := make(chan error, 1)
	go func() {
		lease, err := l.TryAcquire(ctx, "in-flight", distlock.WithAutoRefresh(false))
		if err == nil {
			err = lease.Release(ctx)
		}
		first <- err
	}()
	eventually(t, 10*time.Second, "the first acquisition sent", func() bool { rt, _ := l.d.batch.Stats(); return rt > rt0 })
	qctx, cancel := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() {
		_, err := l.TryAcquire(qctx, "queued")
		second <- err
	}()
	eventually(t, 10*time.Second, "the second acquisition queued", func() bool { return l.d.batch.Pending() == 1 })
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) || !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("cancelled queued acquisition: %v, want ErrNotAcquired wrapping context.Canceled", err)
	}
	require.NoError(t, <-first, "the acquisition in flight")
	time.Sleep(200 * time.Millisecond) // room for an undo, which must not come
	if n := commandCalls(t, admin, "evalsha") + commandCalls(t, admin, "eval"); n != 2 {
		t.Errorf("server ran %d scripts, want 2 (the first acquisition and its release; nothing of the cancelled one)", n)
	}
	if n := admin.Exists(ctx, redislua.KeysFor(redislua.DefaultPrefix, "queued").Lock).Val(); n != 0 {
		t.Error("the cancelled acquisition's lock exists")
	}
}

// TestConcurrentRequestsBatched: 64 goroutines of one Locker acquiring and
// releasing distinct keys share round trips (fewer round trips than
// requests), each gets its own lock, and no goroutine outlives Close.
func TestConcurrentRequestsBatched(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	base := runtime.NumGoroutine()
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, time.Minute)
	pauseServer(t, admin, 300*time.Millisecond) // the first request waits in flight while the others queue
	const workers, rounds = 64, 10
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				lease, err := l.TryAcquire(ctx, fmt.Sprintf("batched/%d/%d", w, i))
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
	rt, reqs := l.d.batch.Stats()
	t.Logf("%d requests in %d round trips", reqs, rt)
	assert.Equal(t, uint64(2*workers*rounds), reqs, "%d requests, want %d", reqs, 2*workers*rounds)
	if rt >= reqs {
		t.Errorf("%d round trips for %d requests: no batching", rt, reqs)
	}
	if left := admin.Keys(ctx, redislua.DefaultPrefix+"{*").Val(); len(left) != 0 {
		t.Errorf("%d locks left after every release", len(left))
	}
	require.NoError(t, l.Close())
	eventually(t, 10*time.Second, "goroutines back to their number before the Locker", func() bool { return runtime.NumGoroutine() <= base })
}
