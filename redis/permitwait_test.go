package redis

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// fairModes runs f for a plain and a fair (WithFair) Locker: a fair
// Locker's Blocker answers ErrSkip for permits, which then wait on the
// semaphore's channel as a plain Locker's do.
func fairModes(t *testing.T, f func(t *testing.T, opts ...Option)) {
	t.Run("plain", func(t *testing.T) { f(t) })
	t.Run("fair", func(t *testing.T) { f(t, WithFair()) })
}

// TestPermitWaitEnds: a permit wait ends promptly, with ErrNotAcquired and
// its cause, when its ctx ended before the call, ends during the wait, or
// its Locker closes; it leaves no permit and, once its Locker is closed,
// no goroutine.
func TestPermitWaitEnds(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	fairModes(t, func(t *testing.T, opts ...Option) {
		admin := adminClient(t, srv.Addr())
		holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()}, opts...)
		ctx := tctx(t, 30*time.Second)
		key := "permitwait/" + t.Name()
		hs, err := holder.Semaphore(key, 1)
		require.NoError(t, err)
		require.Equal(t, distlock.Capabilities{Fencing: true, Notify: true, Expiring: true}, hs.Capabilities(),
			"the permits' capabilities, as before Permitter")
		hp, err := hs.Acquire(ctx, distlock.WithTTL(time.Minute))
		require.NoError(t, err)
		base := runtime.NumGoroutine()
		prompt := slack.D(time.Second)

		w := newTestLocker(t, &goredis.Options{Addr: srv.Addr()}, opts...)
		sem, err := w.Semaphore(key, 1)
		require.NoError(t, err)
		ended, cancel := context.WithCancel(ctx)
		cancel()
		start := time.Now()
		_, err = sem.Acquire(ended)
		require.ErrorIs(t, err, distlock.ErrNotAcquired)
		require.ErrorIs(t, err, context.Canceled)
		require.Less(t, time.Since(start), prompt, "ctx ended before the call")

		counter := newScriptCounter()
		w.client.AddHook(counter)
		got := make(chan error, 1)
		wctx, wcancel := context.WithCancel(ctx)
		go func() { _, err := sem.Acquire(wctx); got <- err }()
		// Two attempts: the first, and the one after Watch.
		eventually(t, slack.D(5*time.Second), "the waiter watching", func() bool { return counter.landed.Load() >= 2 })
		start = time.Now()
		wcancel()
		err = <-got
		require.ErrorIs(t, err, distlock.ErrNotAcquired)
		require.ErrorIs(t, err, context.Canceled)
		require.Less(t, time.Since(start), prompt, "cancelled during the wait")

		n := counter.landed.Load()
		go func() { _, err := sem.Acquire(ctx); got <- err }()
		eventually(t, slack.D(5*time.Second), "the waiter watching", func() bool { return counter.landed.Load() >= n+2 })
		start = time.Now()
		require.NoError(t, w.Close())
		require.ErrorIs(t, <-got, distlock.ErrClosed)
		require.Less(t, time.Since(start), prompt, "Locker closed during the wait")

		require.NoError(t, hp.Release(ctx))
		eventually(t, slack.D(5*time.Second), "no semaphore key left", func() bool { return len(semKeysLeft(t, admin)) == 0 })
		eventually(t, slack.D(10*time.Second), "goroutines back to their number before the waiter's Locker", func() bool {
			return runtime.NumGoroutine() <= base
		})
	})
}

// TestPermitHandoffManyWaiters: 500 waiters over four Lockers for the
// one permit of a semaphore, each holding it once: every one gets it (no
// wake-up lost), within a bounded time.
func TestPermitHandoffManyWaiters(t *testing.T) {
	testserver.SkipShort(t, "500 waiters")
	srv := testserver.Redis(t, testserver.RedisConfig{})
	fairModes(t, func(t *testing.T, opts ...Option) {
		const lockers, waiters = 4, 500
		key := "permitwait/" + t.Name()
		sems := make([]*distlock.Semaphore, lockers)
		counters := make([]*cmdCounter, lockers)
		for i := range sems {
			l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()}, opts...)
			counters[i] = newScriptCounter()
			l.client.AddHook(counters[i])
			s, err := l.Semaphore(key, 1)
			require.NoError(t, err)
			sems[i] = s
		}
		scripts := func() (n int64) {
			for _, c := range counters {
				n += c.landed.Load()
			}
			return n
		}
		ctx := tctx(t, slack.D(2*time.Minute))
		first, err := sems[0].Acquire(ctx, distlock.WithTTL(time.Minute))
		require.NoError(t, err)
		var (
			wg      sync.WaitGroup
			holding atomic.Int32
			done    atomic.Int32
			errs    = make(chan error, waiters)
		)
		for i := range waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := sems[i%lockers].Acquire(ctx, distlock.WithTTL(time.Minute), distlock.WithAutoRefresh(false))
				if err != nil {
					errs <- err
					return
				}
				if holding.Add(1) != 1 {
					errs <- errors.New("two holders of one permit")
				}
				holding.Add(-1)
				done.Add(1)
				if err := p.Release(ctx); err != nil {
					errs <- err
				}
			}()
		}
		// Every waiter made its first attempt and the one after Watch.
		eventually(t, slack.D(30*time.Second), "every waiter watching", func() bool { return scripts() >= 1+2*waiters })
		start, before := time.Now(), scripts()
		require.NoError(t, first.Release(ctx))
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		require.Equal(t, int32(waiters), done.Load())
		took, n := time.Since(start), scripts()-before
		t.Logf("%d handoffs in %v, %d scripts", waiters, took, n)
		// Each handoff: the woken waiter's attempt, its release, one
		// attempt wasted on a wake-up handed on, slack for a loss to a
		// waiter just arriving; plus two attempts a second for each waiter
		// (a notified wait watches anew after a second without a wake-up).
		// A release that woke every waiter would cost one attempt each.
		budget := int64(waiters * (6 + 2*int(took/time.Second+1)))
		require.LessOrEqual(t, n, budget, "scripts for %d handoffs in %v", waiters, took)
	})
}

// TestObserveWokenByReleaseBothModes: Election.Observe over a plain and a
// fair Locker is woken by the leader's release at once, long before its
// minute-long observe interval: a fair Locker's Watch serves observers of
// locks as a plain one's does.
func TestObserveWokenByReleaseBothModes(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	fairModes(t, func(t *testing.T, opts ...Option) {
		leader := newTestLocker(t, &goredis.Options{Addr: srv.Addr()}, opts...)
		lo := newTestLocker(t, &goredis.Options{Addr: srv.Addr()}, opts...)
		ctx := tctx(t, 30*time.Second)
		key := "permitwait/" + t.Name()
		e, err := distlock.NewElection(leader.Locker, key, "one", distlock.WithTermOptions(distlock.WithTTL(time.Minute)))
		require.NoError(t, err)
		observer, err := distlock.NewElection(lo.Locker, key, "observer", distlock.WithObserveInterval(time.Minute))
		require.NoError(t, err)
		term, err := e.Campaign(ctx)
		require.NoError(t, err)
		seen := observer.Observe(tctx(t, 20*time.Second))
		info := <-seen
		require.True(t, info.Held, "the first look sees the leader")
		released := time.Now()
		require.NoError(t, term.Resign(ctx))
		info, ok := <-seen
		require.True(t, ok, "observer closed before it saw the release")
		require.False(t, info.Held)
		require.Less(t, time.Since(released), slack.D(2*time.Second), "the observer woken by the release")
	})
}

// TestPermitAcquireSilentSubscription: a permit wait whose Watch cannot
// get its subscription confirmed (the pub/sub connection silent) still
// returns when its ctx ends, with ErrNotAcquired wrapping the ctx error
// (not ErrUnavailable: the semaphore answered "busy"); plain and fair
// (ErrSkip, then the watched loop).
func TestPermitAcquireSilentSubscription(t *testing.T) {
	fairModes(t, func(t *testing.T, opts ...Option) {
		t.Parallel() // each Close gives up its silent pub/sub connection at its bound (~1.7s)
		srv, p := proxied(t)
		ctx := tctx(t, time.Minute)
		holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
		hs, err := holder.Semaphore("silent/sem", 1)
		require.NoError(t, err)
		_, err = hs.TryAcquire(ctx, distlock.WithTTL(time.Minute))
		require.NoError(t, err)
		w := newTestLocker(t, &goredis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true}, opts...)
		require.NoError(t, w.client.Ping(ctx).Err()) // the command connection, open before the fault
		p.SetScope(netfault.NewConns)                // the pub/sub connection, dialled later
		p.BlackholeDir(netfault.Request)
		sem, err := w.Semaphore("silent/sem", 1)
		require.NoError(t, err)
		const d = 200 * time.Millisecond
		actx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		start := time.Now()
		_, err = sem.Acquire(actx)
		require.Less(t, time.Since(start), d+slack.D(300*time.Millisecond), "permit Acquire with a %v ctx", d)
		require.ErrorIs(t, err, distlock.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, distlock.ErrUnavailable)
	})
}
