package postgres_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/postgres"
	"github.com/stretchr/testify/require"
)

// TestNotifyPermitWaitPolls: with notify=true permits are not announced
// (Watch answers a nil channel), so a permit wait polls at its retry
// policy: it gets the permit after the holder's release, and ends
// promptly, leaving no permit and no goroutine, when its ctx ended before
// the call, ends during the wait, or its Locker closes. The permits claim
// no Notify.
func TestNotifyPermitWaitPolls(t *testing.T) {
	srv := server(t)
	table := uniqueTable("permitwait")
	pool := openPool(t, srv, nil)
	opts := []postgres.Option{postgres.WithNotify(true), postgres.WithTable(table), postgres.WithCreateTable(true)}
	holder := mustNew(t, pool, opts...)
	t.Cleanup(func() { _ = holder.Close() })
	ctx := ctxT(t, time.Minute)
	hs, err := holder.Semaphore("permitwait", 1)
	require.NoError(t, err)
	require.False(t, hs.Capabilities().Notify, "permits of notify mode are polled")
	require.True(t, holder.Capabilities().Notify, "locks of notify mode are announced")
	hp, err := hs.Acquire(ctx, distlock.WithTTL(time.Minute))
	require.NoError(t, err)
	fast := distlock.WithRetry(distlock.Backoff{Min: 20 * time.Millisecond, Max: 20 * time.Millisecond})

	// Woken by its poll after a release.
	w0 := mustNew(t, pool, opts...)
	t.Cleanup(func() { _ = w0.Close() })
	s0, err := w0.Semaphore("permitwait", 1)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		p, err := s0.Acquire(ctx, fast, distlock.WithTTL(time.Minute))
		if err == nil {
			err = p.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, hp.Release(ctx))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(slack.D(5 * time.Second)):
		t.Fatal("the polling permit waiter did not get the permit 5s after its release")
	}
	hp, err = hs.Acquire(ctx, distlock.WithTTL(time.Minute))
	require.NoError(t, err)

	base := runtime.NumGoroutine()
	prompt := slack.D(time.Second)
	w := mustNew(t, pool, opts...)
	sem, err := w.Semaphore("permitwait", 1)
	require.NoError(t, err)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	start := time.Now()
	_, err = sem.Acquire(ended)
	require.ErrorIs(t, err, distlock.ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), prompt, "ctx ended before the call")

	wctx, wcancel := context.WithCancel(ctx)
	// A minute between polls: the cancel and the Close below come during
	// the pause, not during an attempt (whose undo Close would wait for).
	slow := distlock.WithRetry(distlock.Backoff{Min: time.Minute, Max: time.Minute})
	go func() { _, err := sem.Acquire(wctx, slow); got <- err }()
	time.Sleep(100 * time.Millisecond)
	start = time.Now()
	wcancel()
	err = <-got
	require.ErrorIs(t, err, distlock.ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), prompt, "cancelled during the wait")

	go func() { _, err := sem.Acquire(ctx, slow); got <- err }()
	time.Sleep(100 * time.Millisecond)
	// The waiter returns at Close; Close itself may then wait for the
	// undo of an attempt the cancelled wait cut off (sqllock.Base.Undo).
	start = time.Now()
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	require.ErrorIs(t, <-got, distlock.ErrClosed)
	require.Less(t, time.Since(start), prompt, "Locker closed during the wait")
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(slack.D(15 * time.Second)):
		t.Fatal("Close did not return")
	}

	require.NoError(t, hp.Release(ctx))
	p, err := hs.TryAcquire(ctx)
	require.NoError(t, err, "nothing held by the ended waits")
	require.NoError(t, p.Release(ctx))
	require.True(t, waitFor(slack.D(10*time.Second), func() bool { return runtime.NumGoroutine() <= base }),
		"goroutines back to their number before the waiter's Locker: %d, %d before", runtime.NumGoroutine(), base)
}

// TestNotifyObserveWokenByRelease: with notify=true, Election.Observe is
// woken by the leader's release at once, long before its minute-long
// observe interval.
func TestNotifyObserveWokenByRelease(t *testing.T) {
	srv := server(t)
	table := uniqueTable("observe")
	pool := openPool(t, srv, nil)
	opts := []postgres.Option{postgres.WithNotify(true), postgres.WithTable(table), postgres.WithCreateTable(true)}
	leader := mustNew(t, pool, opts...)
	t.Cleanup(func() { _ = leader.Close() })
	lo := mustNew(t, pool, opts...)
	t.Cleanup(func() { _ = lo.Close() })
	ctx := ctxT(t, time.Minute)
	e, err := distlock.NewElection(leader, "observe", "one", distlock.WithTermOptions(distlock.WithTTL(time.Minute)))
	require.NoError(t, err)
	observer, err := distlock.NewElection(lo, "observe", "observer", distlock.WithObserveInterval(time.Minute))
	require.NoError(t, err)
	term, err := e.Campaign(ctx)
	require.NoError(t, err)
	seen := observer.Observe(ctxT(t, 20*time.Second))
	info := <-seen
	require.True(t, info.Held, "the first look sees the leader")
	require.True(t, waitFor(slack.D(10*time.Second), func() bool { n, listening := postgres.Watching(lo, "observe"); return n > 0 && listening }),
		"the observer watching")
	released := time.Now()
	require.NoError(t, term.Resign(ctx))
	info, ok := <-seen
	require.True(t, ok, "observer closed before it saw the release")
	require.False(t, info.Held)
	require.Less(t, time.Since(released), slack.D(2*time.Second), "the observer woken by the release")
}
