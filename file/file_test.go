package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/stretchr/testify/require"
)

// A forced release ends the evicted holder's lease at once, refuses its
// Release, and the next holder gets a higher token and keeps its lock.
func TestForceReleaseEvictsHolder(t *testing.T) {
	dir := t.TempDir()
	a, b, op := newT(t, dir), newT(t, dir), newT(t, dir)
	ctx := ctxT(t, 30*time.Second)
	la, err := a.TryAcquire(ctx, "k", distlock.WithMetadata("job-a"))
	require.NoError(t, err)
	info, err := op.ForceRelease(ctx, "k")
	require.NoError(t, err)
	require.True(t, info.Held)
	require.Equal(t, la.Owner(), info.Owner)
	require.Equal(t, la.Token(), info.Token)
	require.Equal(t, "job-a", info.Metadata)
	select {
	case <-la.Done():
	case <-time.After(slack.D(2 * time.Second)):
		t.Fatal("evicted lease still not ended")
	}
	require.ErrorIs(t, la.Err(), distlock.ErrLockLost)
	lb, err := b.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.Greater(t, lb.Token(), la.Token())
	require.ErrorIs(t, la.Release(ctx), distlock.ErrNotHeld)
	_, err = op.TryAcquire(ctx, "k")
	require.ErrorIs(t, err, distlock.ErrNotAcquired, "the evicted holder's Release freed the new holder's lock")
	hi, err := dirOf(op).Holder(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, lb.Owner(), hi.Owner)
	require.Equal(t, os.Getpid(), hi.PID)
	require.False(t, hi.Since.IsZero())
	require.NoError(t, lb.Release(ctx))
	info, err = op.Inspect(ctx, "k")
	require.NoError(t, err)
	require.False(t, info.Held)
}

// An acquirer that has the kernel lock of a file that a forced release
// replaces before its fence step must not be granted that file: it takes
// the new one, so no other owner can take the lock beside it.
func TestForceReleaseDuringGrant(t *testing.T) {
	dir := t.TempDir()
	var once sync.Once
	reached, gate := make(chan struct{}), make(chan struct{})
	b := newT(t, dir, withHooks(&testHooks{beforeGrant: func(string) {
		once.Do(func() { close(reached); <-gate })
	}}))
	op, c := newT(t, dir), newT(t, dir)
	ctx := ctxT(t, 30*time.Second)
	first, err := op.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, first.Release(ctx))

	type result struct {
		lease *distlock.Lease
		err   error
	}
	res := make(chan result, 1)
	go func() {
		l, err := b.Acquire(ctx, "k")
		res <- result{l, err}
	}()
	<-reached // b has the kernel lock; its token is not drawn yet
	info, err := op.ForceRelease(ctx, "k")
	require.NoError(t, err)
	require.True(t, info.Held, "a lock whose grant is under way is held")
	require.Empty(t, info.Owner)
	close(gate)
	r := <-res
	require.NoError(t, r.err)
	_, err = c.TryAcquire(ctx, "k")
	require.ErrorIs(t, err, distlock.ErrNotAcquired, "two owners hold the lock: b was granted the replaced file")
	got, err := op.Inspect(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, r.lease.Owner(), got.Owner)
	require.Greater(t, r.lease.Token(), first.Token())
	require.NoError(t, r.lease.Release(ctx))
}

// A nested acquisition must not join a hold whose file was replaced by a
// forced release that the holder has not noticed yet.
func TestNestedJoinRechecksHold(t *testing.T) {
	dir := t.TempDir()
	a := newT(t, dir, withHooks(&testHooks{noWatch: true}))
	op := newT(t, dir)
	ctx := ctxT(t, 30*time.Second)
	owner := distlock.WithOwner("x")
	l1, err := a.TryAcquire(ctx, "k", owner)
	require.NoError(t, err)
	_, err = op.ForceRelease(ctx, "k")
	require.NoError(t, err)
	l2, err := a.TryAcquire(ctx, "k", owner)
	require.NoError(t, err)
	require.Greater(t, l2.Token(), l1.Token(), "joined the evicted hold")
	_, err = op.TryAcquire(ctx, "k")
	require.ErrorIs(t, err, distlock.ErrNotAcquired, "the nested lease does not hold the lock")
	require.ErrorIs(t, l1.Release(ctx), distlock.ErrNotHeld)
	require.NoError(t, l2.Release(ctx))
}

// Tokens keep increasing across Lockers closed and opened again (the
// counter is on disk), and reentrant holds share the holder's token.
func TestTokensPersist(t *testing.T) {
	dir := t.TempDir()
	ctx := ctxT(t, 30*time.Second)
	var last uint64
	for range 3 {
		l, err := New(dir)
		require.NoError(t, err)
		lease, err := l.TryAcquire(ctx, "k", distlock.WithOwner("o"))
		require.NoError(t, err)
		nested, err := l.TryAcquire(ctx, "k", distlock.WithOwner("o"))
		require.NoError(t, err)
		require.Equal(t, lease.Token(), nested.Token())
		require.Greater(t, lease.Token(), last)
		last = lease.Token()
		require.NoError(t, l.Close())
	}
}

func TestKeyNames(t *testing.T) {
	keys := []string{"a", "A", "a.b", "a%2eb", ".", "..", "/", "a/b", "a b", "é", "日本", "🔒", "k-a", "%",
		strings.Repeat("x", 1024), strings.Repeat("x", 1023), strings.Repeat("🔒", 256), strings.Repeat("Z", 61), strings.Repeat("Z", 60)}
	seen := map[string]string{}
	for _, k := range keys {
		for _, p := range []string{"k", "s"} {
			n := baseName(p, k)
			require.LessOrEqual(t, len(n)+len(".4095.lock.force-123456789"), 255, "name of %q too long", k)
			require.NotContains(t, n, ".")
			require.NotContains(t, n, "/")
			low := strings.ToLower(n)
			require.Equal(t, low, n, "upper case in a name: keys would collide on a case-insensitive filesystem")
			if prev, dup := seen[n]; dup {
				t.Fatalf("keys %q and %q share the name %q", prev, k, n)
			}
			seen[n] = k
		}
	}
	// Every key of the contract works, and names its own lock.
	dir := t.TempDir()
	l := newT(t, dir)
	ctx := ctxT(t, 30*time.Second)
	var leases []*distlock.Lease
	for _, k := range keys {
		require.True(t, utf8.ValidString(k))
		lease, err := l.TryAcquire(ctx, k)
		require.NoError(t, err, "key %q", k)
		leases = append(leases, lease)
	}
	for _, lease := range leases {
		require.NoError(t, lease.Release(ctx))
	}
	for _, bad := range []string{"", strings.Repeat("x", 1025), "\xff"} {
		_, err := l.TryAcquire(ctx, bad)
		require.ErrorIs(t, err, distlock.ErrInvalidKey)
	}
}

func TestOpenBadInput(t *testing.T) {
	dir := t.TempDir()
	afile := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(afile, nil, 0o644))
	ctx := ctxT(t, 30*time.Second)
	for _, c := range []struct {
		url  string
		want error
	}{
		{"file://host" + dir, distlock.ErrInvalidOption},
		{"file://user:pw@" + dir, distlock.ErrInvalidOption},
		{"file://" + dir + "?nope=1", distlock.ErrInvalidOption},
		{"file://" + dir + "?mkdir=1&mkdir=0", distlock.ErrInvalidOption},
		{"file://" + dir + "#x", distlock.ErrInvalidOption},
		{"file://", distlock.ErrInvalidOption},
		{"file:", distlock.ErrInvalidOption},
		{"file://" + afile, distlock.ErrInvalidOption},
		{"file://" + dir + "/missing", distlock.ErrUnavailable},
		{"file:missing-relative-dir", distlock.ErrUnavailable},
	} {
		l, err := distlock.Open(ctx, c.url)
		if l != nil {
			_ = l.Close()
		}
		require.ErrorIs(t, err, c.want, c.url)
		require.NotContains(t, err.Error(), "\n")
		require.NotContains(t, err.Error(), "pw")
	}
	_, err := New("")
	require.ErrorIs(t, err, distlock.ErrInvalidOption)

	// mkdir=true creates it; the relative form is relative to the
	// working directory.
	t.Chdir(dir)
	l, err := distlock.Open(ctx, "file:rel/locks?mkdir=true")
	require.NoError(t, err)
	lease, err := l.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, lease.Release(ctx))
	require.NoError(t, l.Close())
	_, err = os.Stat(filepath.Join(dir, "rel", "locks", baseName("k", "k")+".lock"))
	require.NoError(t, err)

	ue := &UnsupportedError{GOOS: "windows"}
	require.ErrorIs(t, ue, errors.ErrUnsupported)
	require.ErrorIs(t, ue, backend.ErrInvalidOption)
	require.Contains(t, ue.Error(), "file:// is unsupported on windows")
	require.ErrorIs(t, &UnsafeFSError{Dir: "/mnt", FS: "nfs"}, backend.ErrInvalidOption)
}

func TestUnwritableDir(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes to any directory")
	}
	dir := t.TempDir()
	ro := filepath.Join(dir, "ro")
	require.NoError(t, os.Mkdir(ro, 0o555))
	_, err := New(ro)
	require.ErrorIs(t, err, distlock.ErrInvalidOption)
	require.Contains(t, err.Error(), "not writable")
}

// fence files are fixed width and refuse a corrupt content.
func TestFenceCodec(t *testing.T) {
	fc := fence{Last: 1<<64 - 1, Permits: 4096}
	got, err := decodeFence(fc.encode())
	require.NoError(t, err)
	require.Equal(t, fc, got)
	require.Len(t, fence{}.encode(), fenceLen)
	_, err = decodeFence([]byte("12\n"))
	require.Error(t, err)
	_, err = decodeFence([]byte(fmt.Sprintf("%020d %07d\n", 1, -1)[:fenceLen]))
	require.Error(t, err)
}
