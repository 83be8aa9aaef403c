package file

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// takeRelease acquires key on l and releases it, returning the token.
func takeRelease(t *testing.T, l *distlock.Locker, key string) uint64 {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	lease, err := l.TryAcquire(ctx, key)
	require.NoError(t, err)
	require.NoError(t, lease.Release(ctx))
	return lease.Token()
}

// A fence file emptied behind the backend's back (truncated by an
// operator or a tool) must not restart the token counter silently: the
// lock file's record still knows the last token.
func TestEmptiedFenceNeverRepeatsToken(t *testing.T) {
	dir := t.TempDir()
	l := newT(t, dir)
	fence := filepath.Join(dir, baseName("k", "k")+".fence")
	ctx := ctxT(t, 30*time.Second)
	for _, wipe := range []func() error{
		func() error { return os.Truncate(fence, 0) },
		func() error { return os.Remove(fence) },
	} {
		takeRelease(t, l, "k")
		last := takeRelease(t, l, "k")
		require.NoError(t, wipe())
		lease, err := l.TryAcquire(ctx, "k")
		require.NoError(t, err)
		require.Greater(t, lease.Token(), last, "token went backwards after the fence file was emptied or removed")
		require.NoError(t, lease.Release(ctx))
	}
}

// A corrupt fence file is a clear error, at once, for both Acquire and
// TryAcquire; it issues no token.
func TestCorruptFenceIsAnError(t *testing.T) {
	dir := t.TempDir()
	l := newT(t, dir)
	takeRelease(t, l, "k")
	for _, content := range []string{"00000000000000000001", "garbage\n", "\x00\x00\x00"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, baseName("k", "k")+".fence"), []byte(content), 0o644))
		ctx := ctxT(t, slack.D(5*time.Second))
		_, err := l.TryAcquire(ctx, "k")
		require.Error(t, err)
		require.Contains(t, err.Error(), "corrupt fence")
		start := time.Now()
		_, err = l.Acquire(ctx, "k")
		require.Error(t, err)
		require.Contains(t, err.Error(), "corrupt fence")
		require.True(t, time.Since(start) < slack.D(time.Second), "Acquire on a corrupt fence file did not return at once")
		require.True(t, lockFree(t, dir, "k"))
	}
}

// Reentrancy is per Locker: a second Locker with the same owner id, in
// the same process, is another holder.
func TestSameOwnerTwoLockers(t *testing.T) {
	dir := t.TempDir()
	a, b := newT(t, dir), newT(t, dir)
	ctx := ctxT(t, 30*time.Second)
	la, err := a.TryAcquire(ctx, "k", distlock.WithOwner("o"))
	require.NoError(t, err)
	_, err = b.TryAcquire(ctx, "k", distlock.WithOwner("o"))
	require.ErrorIs(t, err, distlock.ErrNotAcquired)
	short := ctxT(t, 100*time.Millisecond)
	_, err = b.Acquire(short, "k", distlock.WithOwner("o"))
	require.ErrorIs(t, err, distlock.ErrNotAcquired)
	require.NoError(t, la.Release(ctx))
	lb, err := b.TryAcquire(ctx, "k", distlock.WithOwner("o"))
	require.NoError(t, err)
	require.Greater(t, lb.Token(), la.Token())
	require.NoError(t, lb.Release(ctx))
}

// A Locker on a symlink to the directory and one on the directory itself
// contend for the same locks, and a release through one wakes a waiter
// of the other.
func TestSymlinkedDir(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	require.NoError(t, os.Mkdir(real, 0o755))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(real, link))
	a, b := newT(t, real), newT(t, link)
	ctx := ctxT(t, 30*time.Second)
	la, err := a.TryAcquire(ctx, "k")
	require.NoError(t, err)
	_, err = b.TryAcquire(ctx, "k")
	require.ErrorIs(t, err, distlock.ErrNotAcquired)
	got := make(chan error, 1)
	go func() {
		wctx := ctxT(t, slack.D(5*time.Second))
		lb, err := b.Acquire(wctx, "k")
		if err == nil {
			err = lb.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, la.Release(ctx))
	require.NoError(t, <-got)
}

// With the descriptor limit reached, acquisitions fail at once with a
// typed error (ErrUnavailable: retry later), never panic or hang, and the
// leases held keep working.
func TestDescriptorLimit(t *testing.T) {
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old))
	dir := t.TempDir()
	l := newT(t, dir)
	ctx := ctxT(t, time.Minute)
	takeRelease(t, l, "warm")
	lim := old
	lim.Cur = uint64(openFDs(t) + 200)
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
	defer func() { require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)) }()
	var leases []*distlock.Lease
	defer func() {
		for _, lease := range leases {
			_ = lease.Release(ctx)
		}
	}()
	var err error
	for i := range 5000 {
		var lease *distlock.Lease
		lease, err = l.TryAcquire(ctx, fmt.Sprintf("key-%d", i))
		if err != nil {
			break
		}
		leases = append(leases, lease)
	}
	require.Error(t, err, "5,000 leases under a limit of %d descriptors", lim.Cur)
	t.Logf("%d leases, then: %v", len(leases), err)
	require.ErrorIs(t, err, distlock.ErrUnavailable)
	require.True(t, errors.Is(err, syscall.EMFILE))
	start := time.Now()
	wctx := ctxT(t, slack.D(5*time.Second))
	_, err = l.Acquire(wctx, "more")
	require.Error(t, err)
	require.True(t, time.Since(start) < slack.D(2*time.Second), "Acquire waited out its ctx at the descriptor limit: %v", err)
	for _, lease := range leases[:10] {
		require.NoError(t, lease.Refresh(ctx, time.Second))
	}
}

// The same for a semaphore: its permit files keep the last tokens.
func TestEmptiedSemaphoreFenceNeverRepeatsToken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a[1]*") // no glob pattern
	require.NoError(t, os.Mkdir(dir, 0o755))
	l := newT(t, dir)
	ctx := ctxT(t, 30*time.Second)
	sem, err := l.Semaphore("s", 3)
	require.NoError(t, err)
	var last uint64
	for range 3 {
		a, err := sem.TryAcquire(ctx)
		require.NoError(t, err)
		b, err := sem.TryAcquire(ctx)
		require.NoError(t, err)
		last = b.Token()
		require.NoError(t, b.Release(ctx))
		require.NoError(t, a.Release(ctx))
	}
	require.NoError(t, os.Truncate(filepath.Join(dir, baseName("s", "s")+".fence"), 0))
	lease, err := sem.TryAcquire(ctx)
	if err == nil {
		defer lease.Release(ctx)
		require.Greater(t, lease.Token(), last, "token went backwards after the fence file was emptied")
	}
}

// An operator can force the release of a held lock whose record is
// unreadable: the kernel lock, not the record, says it is held.
func TestForceReleaseCorruptRecord(t *testing.T) {
	dir := t.TempDir()
	a, op := newT(t, dir), newT(t, dir)
	ctx := ctxT(t, 30*time.Second)
	la, err := a.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, baseName("k", "k")+".lock"), []byte("{garbage"), 0o644))
	info, err := op.Inspect(ctx, "k")
	require.NoError(t, err)
	require.True(t, info.Held)
	_, err = op.ForceRelease(ctx, "k")
	require.NoError(t, err)
	select {
	case <-la.Done():
	case <-time.After(slack.D(2 * time.Second)):
		t.Fatal("evicted lease still not ended")
	}
	lb, err := op.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.Greater(t, lb.Token(), la.Token())
	require.NoError(t, lb.Release(ctx))
}

// A hold that a forced release evicted, found lost by this Locker's next
// acquisition of the key (a join of the same owner, or a grant of the new
// file to another owner) rather than by its watcher, has its descriptor
// closed: a lease that is lost and never released leaks none.
func TestEvictedHoldClosedWhenFoundByAcquire(t *testing.T) {
	for _, owner := range []string{"same", "other"} {
		t.Run(owner, func(t *testing.T) {
			dir := t.TempDir()
			a := newT(t, dir, withHooks(&testHooks{noWatch: true}))
			op := newT(t, dir)
			ctx := ctxT(t, 30*time.Second)
			takeRelease(t, a, "k")
			base := openFDs(t)
			l1, err := a.TryAcquire(ctx, "k", distlock.WithOwner("same"))
			require.NoError(t, err)
			_, err = op.ForceRelease(ctx, "k")
			require.NoError(t, err)
			l2, err := a.TryAcquire(ctx, "k", distlock.WithOwner(owner))
			require.NoError(t, err)
			require.Greater(t, l2.Token(), l1.Token())
			require.ErrorIs(t, l1.Err(), distlock.ErrLockLost)
			require.NoError(t, l2.Release(ctx))
			require.Equal(t, base, openFDs(t), "descriptors open after the evicted hold was found lost")
		})
	}
}

// A semaphore's waits end with their ctx and leave no descriptor,
// goroutine or permit lock behind: the wait for a permit, for the fence
// lock in an attempt and in Release.
func TestSemaphoreCancelAtEveryAwait(t *testing.T) {
	dir := t.TempDir()
	ctx := ctxT(t, time.Minute)
	warm := newT(t, dir)
	takeRelease(t, warm, "warm")
	require.NoError(t, warm.Close())
	fds, gs := openFDs(t), runtime.NumGoroutine()

	a, err := New(dir)
	require.NoError(t, err)
	b, err := New(dir)
	require.NoError(t, err)
	sa, err := a.Semaphore("s", 1)
	require.NoError(t, err)
	sb, err := b.Semaphore("s", 1)
	require.NoError(t, err)
	const wait = 100 * time.Millisecond
	holder, err := sa.TryAcquire(ctx)
	require.NoError(t, err)
	for range 5 {
		start := time.Now()
		_, err = sb.Acquire(ctxT(t, wait))
		within(t, "semaphore Acquire waiting for a permit", start, wait, err)
		require.ErrorIs(t, err, distlock.ErrNotAcquired)
	}
	ff, err := os.OpenFile(filepath.Join(dir, baseName("s", "s")+".fence"), os.O_RDWR, 0)
	require.NoError(t, err)
	ok, err := tryLock(ff, true)
	require.NoError(t, err)
	require.True(t, ok)
	start := time.Now()
	_, err = sb.Acquire(ctxT(t, wait))
	within(t, "semaphore Acquire waiting for the fence lock", start, wait, err)
	start = time.Now()
	err = holder.Release(ctxT(t, wait))
	if err != nil {
		within(t, "semaphore Release waiting for the fence lock", start, wait, err)
	}
	require.NoError(t, ff.Close())
	l, err := sb.TryAcquire(ctx)
	require.NoError(t, err, "a Release that could not take the fence lock left the permit held")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	settle(t, gs)
	if n := openFDs(t); n > fds {
		t.Fatalf("%d descriptors open, %d before", n, fds)
	}
}

// A release that comes between a waiter's failed attempt and its sleep is
// not lost: the waiter took its wake-up channel before the attempt, so
// the release's kernel event (here the only wake-up: the holder's Locker
// reaches the directory by another path, so this process's direct wake
// does not reach the waiter) ends the sleep at once, well before the
// waiter's poll (pollMax, 1s, once its backoff has grown).
func TestReleaseBetweenAttemptAndSleep(t *testing.T) {
	if !watchSupported(t) {
		t.Skip("no kernel events here")
	}
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	require.NoError(t, os.Mkdir(real, 0o755))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(real, link))
	a := newT(t, real)
	ctx := ctxT(t, 30*time.Second)
	la, err := a.TryAcquire(ctx, "k")
	require.NoError(t, err)
	var (
		b        *distlock.Locker
		sleeps   int
		released time.Time
		won      time.Time // the waiter has the kernel lock; its grant (an fdatasync) comes next
	)
	b = newT(t, link, withHooks(&testHooks{beforeGrant: func(string) { won = time.Now() }, beforeSleep: func(string) {
		if sleeps++; sleeps != 7 { // the backoff has reached pollMax
			return
		}
		ev := driverOf(b).dw.signal(baseName("k", "k") + ".lock")
		released = time.Now()
		require.NoError(t, la.Release(ctx))
		select { // the event has been dispatched
		case <-ev:
		case <-time.After(slack.D(5 * time.Second)):
			t.Error("no kernel event for the release")
		}
	}}))
	require.True(t, driverOf(b).dw.notify)
	lb, err := b.Acquire(ctx, "k")
	require.NoError(t, err)
	took := won.Sub(released)
	require.NoError(t, lb.Release(ctx))
	require.Equal(t, 7, sleeps)
	require.True(t, took < driverOf(b).pollMax()/2, "the waiter slept %v past the release", took)
}

func watchSupported(t *testing.T) bool {
	stop, ok := startWatch(t.TempDir(), func(string) {}, func() {})
	if ok {
		stop()
	}
	return ok
}

// Directory names that can never work are ErrInvalidOption (fix the
// configuration), not ErrUnavailable (retry later).
func TestBadDirNames(t *testing.T) {
	dir := t.TempDir()
	afile := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(afile, nil, 0o644))
	loop := filepath.Join(dir, "loop")
	require.NoError(t, os.Symlink(loop, loop))
	ctx := ctxT(t, 30*time.Second)
	for _, bad := range []string{
		dir + "/a\x00b",
		afile + "/sub",
		loop,
		dir + "/" + strings.Repeat("x", 300),
	} {
		for _, mkdir := range []bool{false, true} {
			var opts []Option
			if mkdir {
				opts = append(opts, WithCreateDir())
			}
			_, err := New(bad, opts...)
			require.ErrorIs(t, err, distlock.ErrInvalidOption, fmt.Sprintf("%q mkdir=%v", bad, mkdir))
			require.NotContains(t, err.Error(), "\n")
			require.NotContains(t, err.Error(), "\x00")
			require.False(t, errors.Is(err, distlock.ErrUnavailable), fmt.Sprintf("%q: %v", bad, err))
		}
	}
	_, err := distlock.Open(ctx, "file://"+dir+"/a%00b")
	require.ErrorIs(t, err, distlock.ErrInvalidOption)
	_, err = New(dir + "/a\nb")
	require.ErrorIs(t, err, distlock.ErrUnavailable)
	require.NotContains(t, err.Error(), "\n")
	require.NotContains(t, err.Error(), "\x00")
	require.Contains(t, err.Error(), `a\nb`)
	_, err = New(afile)
	require.ErrorIs(t, err, distlock.ErrInvalidOption)
	require.Contains(t, err.Error(), afile+" is not a directory")
}

// As root (where TestUnwritableDir skips), an immutable directory
// (chattr +i) is refused by New, and once a Locker is open on it, keys
// that need a new file fail with a typed error at once while existing
// keys keep working.
func TestImmutableDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chattr +i needs root")
	}
	dir := t.TempDir()
	l := newT(t, dir)
	takeRelease(t, l, "old")
	if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
		t.Skipf("chattr +i: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", dir).Run() })
	_, err := New(dir)
	require.ErrorIs(t, err, distlock.ErrInvalidOption)
	require.Contains(t, err.Error(), "not writable")
	ctx := ctxT(t, 30*time.Second)
	takeRelease(t, l, "old")
	start := time.Now()
	_, err = l.Acquire(ctxT(t, slack.D(5*time.Second)), "new")
	require.ErrorIs(t, err, distlock.ErrUnavailable)
	require.True(t, time.Since(start) < slack.D(time.Second), "Acquire in an immutable directory waited: %v", err)
	_, err = l.TryAcquire(ctx, "new")
	require.ErrorIs(t, err, distlock.ErrUnavailable)
}

// A waiter is granted the new lock file at once after a forced release,
// even while the evicted holder still has its descriptor (and its lock on
// the unnamed file) open.
func TestForceReleaseWakesWaiter(t *testing.T) {
	dir := t.TempDir()
	a := newT(t, dir, withHooks(&testHooks{noWatch: true}))
	b, op := newT(t, dir), newT(t, dir)
	ctx := ctxT(t, 30*time.Second)
	la, err := a.TryAcquire(ctx, "k")
	require.NoError(t, err)
	asleep := make(chan struct{}, 1)
	var won time.Time // the waiter has the kernel lock; its grant (an fdatasync) comes next
	w := newT(t, dir, withHooks(&testHooks{beforeGrant: func(string) { won = time.Now() }, beforeSleep: func(string) {
		select {
		case asleep <- struct{}{}:
		default:
		}
	}}))
	got := make(chan *distlock.Lease, 1)
	go func() {
		lw, err := w.Acquire(ctx, "k")
		assert.NoError(t, err)
		got <- lw
	}()
	<-asleep
	forced := time.Now()
	_, err = op.ForceRelease(ctx, "k")
	require.NoError(t, err)
	lw := <-got
	require.True(t, won.Sub(forced) < driverOf(w).pollMax()/2, "the waiter slept past the forced release")
	require.Greater(t, lw.Token(), la.Token())
	_, err = b.TryAcquire(ctx, "k")
	require.ErrorIs(t, err, distlock.ErrNotAcquired)
	require.ErrorIs(t, la.Release(ctx), distlock.ErrNotHeld)
	_, err = b.TryAcquire(ctx, "k")
	require.ErrorIs(t, err, distlock.ErrNotAcquired, "the evicted holder's Release freed the waiter's lock")
	require.NoError(t, lw.Release(ctx))
}

// Close ends the Locker's waiting acquisitions (locks and permits) at
// once with ErrClosed, and leaves no descriptor behind.
func TestCloseEndsWaiters(t *testing.T) {
	dir := t.TempDir()
	h := newT(t, dir)
	ctx := ctxT(t, 30*time.Second)
	takeRelease(t, h, "warm")
	hs, err := h.Semaphore("s", 1)
	require.NoError(t, err)
	lk, err := h.TryAcquire(ctx, "k")
	require.NoError(t, err)
	ps, err := hs.TryAcquire(ctx)
	require.NoError(t, err)
	fds := openFDs(t)
	w, err := New(dir)
	require.NoError(t, err)
	ws, err := w.Semaphore("s", 1)
	require.NoError(t, err)
	errs := make(chan error, 4)
	for range 2 {
		go func() { _, err := w.Acquire(ctx, "k"); errs <- err }()
		go func() { _, err := ws.Acquire(ctx); errs <- err }()
	}
	time.Sleep(slack.D(50 * time.Millisecond)) // let them wait (a late one fails as well)
	start := time.Now()
	require.NoError(t, w.Close())
	for range 4 {
		require.ErrorIs(t, <-errs, distlock.ErrClosed)
	}
	require.True(t, time.Since(start) < slack.D(time.Second), "waiters outlived Close")
	if n := openFDs(t); n > fds {
		t.Fatalf("%d descriptors open, %d before", n, fds)
	}
	require.NoError(t, lk.Release(ctx))
	require.NoError(t, ps.Release(ctx))
}

// A permit file removed by hand ends its holder's lease, as a lock file
// does: the next acquirer takes a new file of that name, and the holder
// must learn that it no longer counts.
func TestRemovedPermitFileEndsLease(t *testing.T) {
	dir := t.TempDir()
	l := newT(t, dir)
	ctx := ctxT(t, 30*time.Second)
	sem, err := l.Semaphore("s", 1)
	require.NoError(t, err)
	p1, err := sem.TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(dir, baseName("s", "s")+".0.lock")))
	select {
	case <-p1.Done():
	case <-time.After(slack.D(2 * time.Second)):
		t.Fatal("the lease of a removed permit file did not end")
	}
	require.ErrorIs(t, p1.Err(), distlock.ErrLockLost)
	p2, err := sem.TryAcquire(ctx)
	require.NoError(t, err)
	require.Greater(t, p2.Token(), p1.Token())
	require.ErrorIs(t, p1.Release(ctx), distlock.ErrNotHeld)
	_, err = sem.TryAcquire(ctx)
	require.ErrorIs(t, err, distlock.ErrNotAcquired, "the lost permit's Release freed the new holder's permit")
	require.NoError(t, p2.Release(ctx))
}

// Tokens keep increasing across a holder killed with SIGKILL (its record
// says held, its kernel lock is gone) and a new process's Locker.
func TestTokenAfterKilledHolder(t *testing.T) {
	dir := t.TempDir()
	ctx := ctxT(t, time.Minute)
	var last uint64
	for range 2 {
		h := startHelper(t, helperCfg{Mode: "hold", URL: "file://" + dir, Key: "k", N: 1})
		h.expect(t, "held", slack.D(time.Minute))
		l := newT(t, dir)
		info, err := l.Inspect(ctx, "k/0")
		require.NoError(t, err)
		require.True(t, info.Held)
		require.Greater(t, info.Token, last)
		require.NoError(t, h.cmd.Process.Signal(syscall.SIGKILL))
		_ = h.cmd.Wait()
		lease, err := l.TryAcquire(ctx, "k/0")
		require.NoError(t, err)
		require.Greater(t, lease.Token(), info.Token)
		last = lease.Token()
		require.NoError(t, lease.Release(ctx))
		require.NoError(t, l.Close())
	}
}

// Keys with control bytes, of one byte and of the longest length name
// their own locks and semaphores; URL forms with a host are refused.
func TestOddKeysAndURLs(t *testing.T) {
	dir := t.TempDir()
	l := newT(t, dir)
	ctx := ctxT(t, 30*time.Second)
	keys := []string{"\x00", "\n", "a\x00b", "a\nb", "\r\n", "\t", "a", "A", strings.Repeat("\x00", 1024), strings.Repeat("a", 1024), strings.Repeat("A", 1024)}
	var leases []*distlock.Lease
	for _, k := range keys {
		lease, err := l.TryAcquire(ctx, k)
		require.NoError(t, err, fmt.Sprintf("key %q", k))
		leases = append(leases, lease)
		sem, err := l.Semaphore(k, 2)
		require.NoError(t, err)
		p, err := sem.TryAcquire(ctx)
		require.NoError(t, err, fmt.Sprintf("semaphore %q", k))
		leases = append(leases, p)
		info, err := l.Inspect(ctx, k)
		require.NoError(t, err)
		require.True(t, info.Held)
		require.Equal(t, lease.Token(), info.Token)
	}
	for _, lease := range leases {
		require.NoError(t, lease.Release(ctx))
	}
	for _, u := range []string{"file://relative", "file://relative/dir", "file://localhost" + dir, "file://127.0.0.1" + dir, "file://" + dir + "?mkdir=true&x=1"} {
		_, err := distlock.Open(ctx, u)
		require.ErrorIs(t, err, distlock.ErrInvalidOption, u)
	}
	ok, err := distlock.Open(ctx, "file://"+dir)
	require.NoError(t, err)
	require.NoError(t, ok.Close())
}

// A TryAcquire that finds the lock held wakes no waiter: it closes no
// descriptor opened for writing (an inotify IN_CLOSE_WRITE, which every
// waiter of the key in every process takes for a release).
func TestBusyTryAcquireWakesNobody(t *testing.T) {
	if !watchSupported(t) {
		t.Skip("no kernel events here")
	}
	dir := t.TempDir()
	a := newT(t, dir)
	ctx := ctxT(t, 60*time.Second)
	la, err := a.TryAcquire(ctx, "k")
	require.NoError(t, err)
	type sleep struct {
		n  int
		at time.Time
	}
	slept := make(chan sleep, 64)
	n := 0
	w := newT(t, dir, withHooks(&testHooks{beforeSleep: func(string) {
		n++
		select {
		case slept <- sleep{n, time.Now()}:
		default:
		}
	}}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = w.Acquire(ctxT(t, slack.D(30*time.Second)), "k")
	}()
	// Once two sleeps began a poll apart, the waiter's backoff has reached
	// its 1s poll (the timer starts after the hook; an event before that,
	// such as the holder's own acquisition, restarts the backoff, so the
	// sleep's number says nothing): a sleep that ends sooner was ended by
	// an event. The TryAcquires go right after a poll began, so that a
	// wake they cause falls inside it; on a loaded machine that reads the
	// hook late, a later poll is used.
	const poll = time.Second
	prev, last := <-slept, <-slept
	for last.at.Sub(prev.at) < poll {
		prev, last = last, <-slept
	}
	for range 10 {
		if time.Since(last.at) > poll/2 {
			last = <-slept
			continue
		}
		for range 5 {
			_, err = a.TryAcquire(ctx, "k", distlock.WithOwner("other"))
			require.ErrorIs(t, err, distlock.ErrNotAcquired)
		}
		select {
		case next := <-slept:
			if d := next.at.Sub(last.at); d < poll {
				t.Errorf("the waiter woke %v into its %v poll (sleep %d) for a TryAcquire that found the lock busy", d, poll, next.n)
			}
		case <-time.After(slack.D(5 * time.Second)):
			t.Errorf("the waiter's %v poll did not end", poll)
		}
		require.NoError(t, la.Release(ctx))
		<-done
		return
	}
	t.Fatalf("the test read no poll within %v of its start in 10 polls", poll/2)
}
