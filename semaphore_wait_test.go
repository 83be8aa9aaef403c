package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/memory"
	"github.com/stretchr/testify/require"
)

// hookDriver is a memory session whose Blocker and Notifier are the
// memory driver's unless a hook replaces them: the shape of a driver that
// bends the ErrSkip / nil-channel contract.
type hookDriver struct {
	backend.Driver
	pm      backend.Permitter
	blocker backend.Blocker
	watcher backend.Notifier

	acquire func(ctx context.Context, req backend.Request) (backend.Lock, error)
	watch   func(ctx context.Context, req backend.Request) (<-chan struct{}, func())

	tries, inspects atomic.Int32
}

func newHookDriver(t *testing.T, ns string) *hookDriver {
	t.Helper()
	open, err := backend.Lookup("mem")
	require.NoError(t, err)
	d, err := open(t.Context(), &url.URL{Scheme: "mem", Host: ns})
	require.NoError(t, err)
	return &hookDriver{Driver: d, pm: d.(backend.Permitter), blocker: d.(backend.Blocker), watcher: d.(backend.Notifier)}
}

func (d *hookDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	d.tries.Add(1)
	return d.Driver.TryAcquire(ctx, req)
}

func (d *hookDriver) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	d.inspects.Add(1)
	return d.Driver.Inspect(ctx, key)
}

func (d *hookDriver) Acquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if d.acquire != nil {
		return d.acquire(ctx, req)
	}
	return d.blocker.Acquire(ctx, req)
}

func (d *hookDriver) Watch(ctx context.Context, req backend.Request) (<-chan struct{}, func()) {
	if d.watch != nil {
		return d.watch(ctx, req)
	}
	return d.watcher.Watch(ctx, req)
}

func (d *hookDriver) PermitCapabilities() (backend.Capabilities, error) {
	return d.pm.PermitCapabilities()
}

// TestErrSkipWithLockLeavesNothingHeld: a Blocker that answers ErrSkip
// together with a lock (against the contract: ErrSkip comes before
// anything is sent) must not leave that lock held: distlock gives it back
// and waits as for ErrSkip alone.
func TestErrSkipWithLockLeavesNothingHeld(t *testing.T) {
	d := newHookDriver(t, t.Name())
	var skipped atomic.Int32
	d.acquire = func(ctx context.Context, req backend.Request) (backend.Lock, error) {
		lock, err := d.Driver.TryAcquire(ctx, req)
		if err != nil {
			return nil, err
		}
		skipped.Add(1)
		return lock, backend.ErrSkip
	}
	l := distlock.New(d, "hook")
	defer l.Close()
	sem, err := l.Semaphore("sem", 1)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), slack.D(2*time.Second))
	defer cancel()
	p, err := sem.Acquire(ctx, distlock.WithTTL(time.Hour))
	require.NoError(t, err, "the only permit: the lock answered with ErrSkip must not keep it")
	require.Equal(t, int32(1), skipped.Load())
	require.NoError(t, p.Release(ctx))
	q, err := sem.TryAcquire(ctx, distlock.WithTTL(time.Hour))
	require.NoError(t, err, "after the release nothing is held")
	require.NoError(t, q.Release(ctx))
}

// TestWatchNilChannelCancelIsCalled: a Watch that answers a nil channel
// with a non-nil cancel (the contract says both nil) has its cancel called
// when distlock gives up the watch, so a registration it made is not left
// behind.
func TestWatchNilChannelCancelIsCalled(t *testing.T) {
	d := newHookDriver(t, t.Name())
	var watches, cancels atomic.Int32
	d.watch = func(context.Context, backend.Request) (<-chan struct{}, func()) {
		watches.Add(1)
		return nil, func() { cancels.Add(1) }
	}
	l := distlock.New(d, "hook")
	defer l.Close()
	sem, err := l.Semaphore("sem", 1)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), slack.D(5*time.Second))
	defer cancel()
	p, err := sem.Acquire(ctx)
	require.NoError(t, err)
	wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = sem.Acquire(wctx, distlock.WithRetry(distlock.Backoff{Min: 5 * time.Millisecond, Max: 5 * time.Millisecond}))
	wcancel()
	require.ErrorIs(t, err, distlock.ErrNotAcquired)
	require.NoError(t, p.Release(ctx))
	require.Equal(t, int32(1), watches.Load(), "one Watch per wait")
	require.Equal(t, int32(1), cancels.Load(), "the cancel of the nil-channel Watch")
}

// TestWrappedErrSkipFailsClearly: ErrSkip is honoured only bare
// (backend.ErrSkip); a driver that wraps it gets its error back at once,
// one line, wrapping ErrSkip, and nothing is held.
func TestWrappedErrSkipFailsClearly(t *testing.T) {
	d := newHookDriver(t, t.Name())
	d.acquire = func(context.Context, backend.Request) (backend.Lock, error) {
		return nil, fmt.Errorf("hook: %w", backend.ErrSkip)
	}
	l := distlock.New(d, "hook")
	defer l.Close()
	sem, err := l.Semaphore("sem", 1)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), slack.D(2*time.Second))
	defer cancel()
	_, err = sem.Acquire(ctx)
	require.ErrorIs(t, err, backend.ErrSkip)
	require.NotContains(t, err.Error(), "\n")
	require.Zero(t, d.tries.Load(), "no attempt: the wrapped ErrSkip is the driver's failure")
	p, err := sem.TryAcquire(ctx)
	require.NoError(t, err, "nothing held")
	require.NoError(t, p.Release(ctx))
}

// TestMemoryLockWaitIsNative: a lock wait on memory stays in the driver's
// queue (no TryAcquire polling, no Watch), now that memory is a Notifier
// for permits.
func TestMemoryLockWaitIsNative(t *testing.T) {
	d := newHookDriver(t, t.Name())
	var watches atomic.Int32
	d.watch = func(ctx context.Context, req backend.Request) (<-chan struct{}, func()) {
		watches.Add(1)
		return d.watcher.Watch(ctx, req)
	}
	l := distlock.New(d, "hook")
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), slack.D(5*time.Second))
	defer cancel()
	held, err := l.Acquire(ctx, "k")
	require.NoError(t, err)
	tries := d.tries.Load()
	const waiters = 5
	order := make(chan int, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := l.Acquire(ctx, "k", distlock.WithRetry(distlock.Backoff{Min: time.Millisecond, Max: time.Millisecond}))
			if err != nil {
				order <- -1
				return
			}
			order <- i
			_ = lease.Release(ctx)
		}()
		// Each waiter queued before the next arrives.
		require.Eventually(t, func() bool {
			info, err := l.Inspect(ctx, "k")
			return err == nil && info.Waiters == i+1
		}, slack.D(2*time.Second), time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // at 1ms retries, a polling wait would try here
	require.NoError(t, held.Release(ctx))
	wg.Wait()
	close(order)
	want := 0
	for i := range order {
		require.Equal(t, want, i, "arrival order")
		want++
	}
	require.Equal(t, tries, d.tries.Load(), "no TryAcquire during lock waits")
	require.Zero(t, watches.Load(), "no Watch during lock waits")
}

// TestMemoryObserveDoesNotSpin: memory is a Notifier that announces no
// lock releases (a nil channel): Observe polls at its interval, and does
// not fall into the quick polls of an announcing backend.
func TestMemoryObserveDoesNotSpin(t *testing.T) {
	d := newHookDriver(t, t.Name())
	l := distlock.New(d, "hook")
	defer l.Close()
	e, err := distlock.NewElection(l, "lead", "me", distlock.WithObserveInterval(time.Hour))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	ch := e.Observe(ctx)
	<-ch // nobody leads
	time.Sleep(200 * time.Millisecond)
	cancel()
	for range ch {
	}
	require.LessOrEqual(t, d.inspects.Load(), int32(1), "Inspect calls in 200ms at a 1h interval")
}

// TestMemoryPermitWaitEnds: a permit wait on memory (ErrSkip, then the watched
// loop) ends promptly with ErrNotAcquired and
// the cause when its ctx has ended before the call, ends during the wait,
// or its Locker closes; nothing is held after, no goroutine stays.
func TestMemoryPermitWaitEnds(t *testing.T) {
	ns := memory.NewNamespace()
	open := func() *distlock.Locker { return memory.MustNew(ns) }
	holder := open()
	t.Cleanup(func() { _ = holder.Close() })
	hs := newSem(t, holder, "s", 1)
	require.Equal(t, distlock.Capabilities{Fencing: true, Notify: true, SessionBound: true, Expiring: true}, hs.Capabilities(), "the permits' capabilities, as before Permitter")
	hp, err := hs.Acquire(t.Context(), distlock.WithTTL(time.Hour))
	require.NoError(t, err)
	base := runtime.NumGoroutine()
	prompt := slack.D(500 * time.Millisecond)

	l := open()
	sem := newSem(t, l, "s", 1)
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	_, err = sem.Acquire(ended)
	require.ErrorIs(t, err, distlock.ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), prompt, "ctx ended before the call")

	wctx, wcancel := context.WithCancel(t.Context())
	got := make(chan error, 1)
	go func() { _, err := sem.Acquire(wctx); got <- err }()
	time.Sleep(30 * time.Millisecond)
	start = time.Now()
	wcancel()
	err = <-got
	require.ErrorIs(t, err, distlock.ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), prompt, "cancelled during the wait")

	go func() { _, err := sem.Acquire(t.Context()); got <- err }()
	time.Sleep(30 * time.Millisecond)
	start = time.Now()
	require.NoError(t, l.Close())
	require.ErrorIs(t, <-got, distlock.ErrClosed)
	require.Less(t, time.Since(start), prompt, "Locker closed during the wait")

	require.NoError(t, hp.Release(t.Context()))
	p, err := hs.TryAcquire(t.Context())
	require.NoError(t, err, "nothing held by the ended waits")
	require.NoError(t, p.Release(t.Context()))
	if msg := goroutinesBack(base); msg != "" {
		t.Fatal(msg)
	}
}

// TestMemoryPermitHandoff2000: 2,000 waiters for the one permit of a
// semaphore on memory, each holding it once: every one gets it (no lost
// wake-up), in bounded time, with a bounded number of attempts (a release
// wakes one waiter, not all).
func TestMemoryPermitHandoff2000(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 waiters")
	}
	const lockers, waiters = 4, 2000
	var watching atomic.Int32 // permit waits that called Watch
	sems := make([]*distlock.Semaphore, lockers)
	drivers := make([]*hookDriver, lockers)
	for i := range sems {
		d := newHookDriver(t, t.Name())
		drivers[i] = d
		d.watch = func(ctx context.Context, req backend.Request) (<-chan struct{}, func()) {
			ch, cancel := d.watcher.Watch(ctx, req)
			watching.Add(1)
			return ch, cancel
		}
		l := distlock.New(d, "hook")
		t.Cleanup(func() { _ = l.Close() })
		sems[i] = newSem(t, l, "one", 1)
	}
	ctx, cancel := context.WithTimeout(t.Context(), slack.D(60*time.Second))
	defer cancel()
	first, err := sems[0].Acquire(ctx, distlock.WithTTL(time.Minute))
	require.NoError(t, err)
	var (
		wg      sync.WaitGroup
		holding atomic.Int32
		done    atomic.Int32
		errs    = make(chan error, waiters)
	)
	start := time.Now()
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
	require.Eventually(t, func() bool { return watching.Load() >= waiters }, slack.D(20*time.Second), time.Millisecond, "every waiter watching")
	require.NoError(t, first.Release(ctx))
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	require.Equal(t, int32(waiters), done.Load())
	tries := int32(0)
	for _, d := range drivers {
		tries += d.tries.Load()
	}
	took := time.Since(start)
	t.Logf("%d handoffs in %v, %d attempts, %d watches", waiters, took, tries, watching.Load())
	// Each waiter: its first attempt, the one after Watch, the one its
	// wake-up starts, and one wasted on a wake-up handed on; plus two a
	// second while it waits (a notified wait watches anew after a second
	// without a wake-up). A release that woke every waiter made ~17
	// attempts a waiter in 0.35s (137 in 12s under -race).
	budget := int32(waiters * (4 + 2*int(took/time.Second+1)))
	require.LessOrEqual(t, tries, budget, "attempts for %d handoffs in %v", waiters, took)
}

// TestObserveNilChannelCancelIsCalled: Observe over a Watch that answers
// a nil channel with a non-nil cancel calls that cancel as soon as it
// falls back to polling, not only when the observation ends.
func TestObserveNilChannelCancelIsCalled(t *testing.T) {
	d := newHookDriver(t, t.Name())
	var cancels atomic.Int32
	d.watch = func(context.Context, backend.Request) (<-chan struct{}, func()) {
		return nil, func() { cancels.Add(1) }
	}
	l := distlock.New(d, "hook")
	defer l.Close()
	e, err := distlock.NewElection(l, "lead", "me", distlock.WithObserveInterval(time.Hour))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch := e.Observe(ctx)
	<-ch
	require.Eventually(t, func() bool { return cancels.Load() == 1 }, slack.D(time.Second), time.Millisecond,
		"the nil-channel Watch's cancel, while Observe polls")
}

// refusingDriver is a memory session whose PermitCapabilities refuses
// with a bare error (the contract asks for one wrapping
// ErrInvalidOption).
type refusingDriver struct{ backend.Driver }

func (refusingDriver) PermitCapabilities() (backend.Capabilities, error) {
	return backend.Capabilities{}, errors.New("refusing: this mode has no semaphores")
}

// TestPermitRefusalIsInvalidOption: Locker.Semaphore of a backend whose
// mode has no semaphores fails with ErrInvalidOption, as documented, and
// the driver's reason, even when the driver's error does not wrap it.
func TestPermitRefusalIsInvalidOption(t *testing.T) {
	d := newHookDriver(t, t.Name())
	l := distlock.New(refusingDriver{d.Driver}, "refusing")
	defer l.Close()
	_, err := l.Semaphore("s", 1)
	require.ErrorIs(t, err, distlock.ErrInvalidOption)
	require.ErrorContains(t, err, "this mode has no semaphores")
}
