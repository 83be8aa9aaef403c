package file

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/stretchr/testify/require"
)

// lockFree reports whether the lock file of key in dir is free in the kernel.
func lockFree(t testing.TB, dir, key string) bool {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, baseName("k", key)+".lock"))
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	require.NoError(t, err)
	defer f.Close()
	held, err := probe(f)
	require.NoError(t, err)
	return !held
}

// holdFence takes the fence lock of key from outside any Locker, until
// the returned func is called.
func holdFence(t testing.TB, dir, key string) func() {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, baseName("k", key)+".fence"), os.O_RDWR, 0)
	require.NoError(t, err)
	ok, err := tryLock(f, true)
	require.NoError(t, err)
	require.True(t, ok)
	return func() { _ = f.Close() }
}

// within fails unless err shows ctx's deadline and came within bound of it.
func within(t testing.TB, what string, start time.Time, wait time.Duration, err error) {
	t.Helper()
	require.ErrorIs(t, err, context.DeadlineExceeded, what)
	if took := time.Since(start); took > wait+slack.D(time.Second) {
		t.Fatalf("%s returned %v after its ctx ended", what, took-wait)
	}
}

// Every wait ends with its ctx and leaves no lock behind: the wait for the
// kernel lock, for the fence lock in a grant, in a nested count update, in
// Release, Inspect and ForceRelease.
func TestCancelAtEveryAwait(t *testing.T) {
	dir := t.TempDir()
	a, b, c := newT(t, dir), newT(t, dir), newT(t, dir)
	ctx := ctxT(t, time.Minute)
	const wait = 100 * time.Millisecond
	short := func() context.Context { return ctxT(t, wait) }

	holder, err := a.TryAcquire(ctx, "k", distlock.WithOwner("o"))
	require.NoError(t, err)
	start := time.Now()
	_, err = b.Acquire(short(), "k")
	within(t, "Acquire waiting for the kernel lock", start, wait, err)
	require.ErrorIs(t, err, distlock.ErrNotAcquired)

	release := holdFence(t, dir, "k")
	start = time.Now()
	_, err = a.Acquire(short(), "k", distlock.WithOwner("o"))
	within(t, "nested Acquire waiting for the fence lock", start, wait, err)
	start = time.Now()
	_, err = c.Inspect(short(), "k")
	within(t, "Inspect waiting for the fence lock", start, wait, err)
	start = time.Now()
	_, err = c.ForceRelease(short(), "k")
	within(t, "ForceRelease waiting for the fence lock", start, wait, err)
	start = time.Now()
	err = holder.Release(short())
	if err != nil {
		within(t, "Release waiting for the fence lock", start, wait, err)
	}
	require.True(t, lockFree(t, dir, "k"), "Release that could not take the fence lock left the kernel lock held")

	start = time.Now()
	_, err = b.Acquire(short(), "k")
	within(t, "Acquire waiting for the fence lock in its grant", start, wait, err)
	require.True(t, lockFree(t, dir, "k"), "an Acquire cancelled in its grant left the kernel lock held")
	release()

	lease, err := c.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, lease.Release(ctx))
}

// A holder releasing while a forced release is between its look and its
// swap waits for the swap (both take the fence lock) and is refused.
func TestReleaseDuringForcedRelease(t *testing.T) {
	dir := t.TempDir()
	a, b := newT(t, dir), newT(t, dir)
	ctx := ctxT(t, time.Minute)
	lease, err := a.TryAcquire(ctx, "k")
	require.NoError(t, err)
	relErr := make(chan error, 1)
	op := newT(t, dir, withHooks(&testHooks{beforeSwap: func(string) {
		go func() { relErr <- lease.Release(ctx) }()
		select {
		case err := <-relErr:
			t.Errorf("Release returned %v while a forced release was under way", err)
		case <-time.After(50 * time.Millisecond):
		}
	}}))
	info, err := op.ForceRelease(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, lease.Token(), info.Token)
	select {
	case err := <-relErr:
		require.ErrorIs(t, err, distlock.ErrNotHeld)
	case <-time.After(slack.D(5 * time.Second)):
		t.Fatal("Release still blocked after the forced release")
	}
	next, err := b.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.Greater(t, next.Token(), lease.Token())
	require.NoError(t, next.Release(ctx))
}

// openFDs counts this process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// settle waits, bounded, until the goroutine count is back to at most n.
func settle(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(slack.D(5 * time.Second))
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Cancelled, refused and completed acquisitions leave no descriptor or
// goroutine behind once their Lockers are closed.
func TestNoLeaks(t *testing.T) {
	dir := t.TempDir()
	ctx := ctxT(t, time.Minute)
	// Warm up the runtime's own descriptors (epoll) and goroutines.
	warm := newT(t, dir)
	l, err := warm.Acquire(ctx, "warm")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.NoError(t, warm.Close())
	fds, gs := openFDs(t), runtime.NumGoroutine()

	a, err := New(dir)
	require.NoError(t, err)
	b, err := New(dir)
	require.NoError(t, err)
	holder, err := a.TryAcquire(ctx, "k")
	require.NoError(t, err)
	for i := range 200 {
		cctx, cancel := context.WithCancel(ctx)
		if i%2 == 0 {
			time.AfterFunc(time.Duration(i%7)*time.Millisecond, cancel)
		} else {
			cancel()
		}
		_, err := b.Acquire(cctx, "k")
		cancel()
		require.ErrorIs(t, err, distlock.ErrNotAcquired)
		_, err = b.TryAcquire(ctx, "k")
		require.ErrorIs(t, err, distlock.ErrNotAcquired)
		lease, err := b.TryAcquire(ctx, fmt.Sprintf("free/%d", i%10), distlock.WithOwner("o"))
		require.NoError(t, err)
		nested, err := b.TryAcquire(ctx, fmt.Sprintf("free/%d", i%10), distlock.WithOwner("o"))
		require.NoError(t, err)
		require.NoError(t, nested.Release(ctx))
		require.NoError(t, lease.Release(ctx))
	}
	_ = holder // Close releases it
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	settle(t, gs)
	if n := openFDs(t); n > fds {
		t.Fatalf("%d descriptors open, %d before", n, fds)
	}
	require.True(t, lockFree(t, dir, "k"), "Close left a lock held")
}

// 1,000 leases held at once in one process, on distinct keys, and 1,000
// waiters of one key served one at a time.
func TestThousandLeasesInProcess(t *testing.T) {
	dir := t.TempDir()
	ctx := ctxT(t, 2*time.Minute)
	fds := openFDs(t)
	ls := []*distlock.Locker{newT(t, dir), newT(t, dir), newT(t, dir), newT(t, dir)}
	const n = 1000
	var (
		wg     sync.WaitGroup
		leases = make([]*distlock.Lease, n)
		errs   = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			leases[i], errs[i] = ls[i%4].Acquire(ctx, fmt.Sprintf("many/%d", i))
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
	}
	info, err := ls[1].Inspect(ctx, "many/500")
	require.NoError(t, err)
	require.Equal(t, leases[500].Owner(), info.Owner)
	for _, l := range leases {
		require.NoError(t, l.Release(ctx))
	}

	var inside, overlaps, done atomic.Int64
	var last atomic.Uint64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := ls[i%4].Acquire(ctx, "one")
			if err != nil {
				errs[i] = err
				return
			}
			if inside.Add(1) != 1 {
				overlaps.Add(1)
			}
			if prev := last.Swap(l.Token()); l.Token() <= prev {
				errs[i] = fmt.Errorf("token %d after %d", l.Token(), prev)
			}
			inside.Add(-1)
			done.Add(1)
			if err := l.Release(ctx); err != nil && errs[i] == nil {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
	}
	require.Equal(t, int64(n), done.Load())
	require.Equal(t, int64(0), overlaps.Load())
	for _, l := range ls {
		require.NoError(t, l.Close())
	}
	if got := openFDs(t); got > fds {
		t.Fatalf("%d descriptors open, %d before", got, fds)
	}
}

// 1,000 leases held by 4 processes; when the processes are killed the
// kernel frees every one of them at once.
func TestThousandLeasesAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	ctx := ctxT(t, 2*time.Minute)
	l := newT(t, dir)
	const procs, per = 4, 250
	pids := map[int]bool{}
	var hs []*helper
	for p := range procs {
		h := startHelper(t, helperCfg{Mode: "hold", URL: "file://" + dir, Key: fmt.Sprintf("p%d", p), N: per})
		h.expect(t, "held", slack.D(time.Minute))
		pids[h.cmd.Process.Pid] = true
		hs = append(hs, h)
	}
	for p := range procs {
		for i := range per {
			key := fmt.Sprintf("p%d/%d", p, i)
			hi, err := dirOf(l).Holder(ctx, key)
			require.NoError(t, err)
			require.True(t, hi.Held, key)
			require.True(t, pids[hi.PID], "holder pid %d of %s is not a helper's", hi.PID, key)
		}
	}
	_, err := l.TryAcquire(ctx, "p0/0")
	require.ErrorIs(t, err, distlock.ErrNotAcquired)
	for _, h := range hs {
		require.NoError(t, h.cmd.Process.Signal(syscall.SIGKILL))
		_ = h.cmd.Wait()
	}
	for p := range procs {
		for i := range per {
			lease, err := l.TryAcquire(ctx, fmt.Sprintf("p%d/%d", p, i))
			require.NoError(t, err, "lock of a killed process not freed")
			require.NoError(t, lease.Release(ctx))
		}
	}
}

// A waiter in this process is woken when a holder in another process is
// killed: the kernel closes its descriptor (an inotify event) an instant
// before it drops the lock, and the waiter tries again at once and after
// 1ms, 4ms, ...
func TestKilledHolderWakesWaiter(t *testing.T) {
	dir := t.TempDir()
	l := newT(t, dir)
	if !l.Capabilities().Notify {
		t.Skip("no kernel events here: waiters poll")
	}
	ctx := ctxT(t, time.Minute)
	h := startHelper(t, helperCfg{Mode: "hold", URL: "file://" + dir, Key: "k", N: 1})
	h.expect(t, "held", slack.D(time.Minute))
	got := make(chan time.Time, 1)
	go func() {
		lease, err := l.Acquire(ctx, "k/0", distlock.WithRetry(distlock.Backoff{Min: time.Minute, Max: time.Minute}))
		if err == nil {
			_ = lease.Release(ctx)
		}
		got <- time.Now()
	}()
	time.Sleep(50 * time.Millisecond) // the waiter is asleep
	killed := time.Now()
	require.NoError(t, h.cmd.Process.Signal(syscall.SIGKILL))
	select {
	case at := <-got:
		t.Logf("acquired %v after the holder was killed", at.Sub(killed))
		if lag := at.Sub(killed); lag > slack.D(500*time.Millisecond) {
			t.Errorf("waiter woke %v after the holder died", lag)
		}
	case <-time.After(slack.D(10 * time.Second)):
		t.Fatal("waiter not woken after the holder died")
	}
}

// A process stopped while it holds a key's fence lock (in the middle of
// its grant) holds up neither TryAcquire, which makes one attempt, nor
// Close, which drops its locks all the same.
func TestFenceHolderStopped(t *testing.T) {
	dir := t.TempDir()
	a := newT(t, dir)
	ctx := ctxT(t, time.Minute)
	lease, err := a.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, lease.Release(ctx))
	release := holdFence(t, dir, "k")
	t.Cleanup(func() { release() })
	start := time.Now()
	_, err = a.TryAcquire(ctx, "k")
	require.ErrorIs(t, err, distlock.ErrUnavailable)
	if took := time.Since(start); took > fenceWaitTry+slack.D(time.Second) {
		t.Fatalf("TryAcquire took %v with the fence lock taken", took)
	}
	require.True(t, lockFree(t, dir, "k"))

	b, err := New(dir)
	require.NoError(t, err)
	release()
	held, err := b.TryAcquire(ctx, "k")
	require.NoError(t, err)
	_ = held
	release = holdFence(t, dir, "k")
	start = time.Now()
	require.NoError(t, b.Close())
	if took := time.Since(start); took > closeGrace+slack.D(time.Second) {
		t.Fatalf("Close took %v with the fence lock taken", took)
	}
	require.True(t, lockFree(t, dir, "k"), "Close left the lock held")
}
