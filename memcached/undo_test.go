package memcached

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCloseAfterAbandonedAcquireLeavesNoLock: an acquisition whose request
// is still in the network when its ctx ends, followed at once by Close of
// the Locker (a service shutting down after a timeout). The grant lands
// while Close waits for the group: the late result must still be given
// back. Before the fix the undo ran on the driver's bg context, which Close
// cancels first, so Retry made no try at all and the lock stayed for its
// whole TTL.
func TestCloseAfterAbandonedAcquireLeavesNoLock(t *testing.T) {
	srv, p, l, key := warmProxied(t, "close-race")
	var err error

	p.DelayRequests(300 * time.Millisecond) // below gomemcache's 500ms timeout: the grant arrives
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	_, err = l.TryAcquire(ctx, key, distlock.WithTTL(10*time.Minute))
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "TryAcquire with its request in flight: %v, want the ctx error", err)
	start := time.Now()
	require.NoError(t, l.Close())
	if took := time.Since(start); took > 6*time.Second {
		t.Errorf("Close took %v", took)
	}
	p.Heal()

	expectFreedWithin(t, srv, key, 5*time.Second, "the abandoned acquisition's lock (TTL 10m)")
}

// expectFreedWithin polls, from a new client, until key can be taken, and
// fails the test if that takes longer than d: what the key's holder left
// behind is still on the server then.
func expectFreedWithin(t *testing.T, srv *testserver.Server, key string, d time.Duration, what string) {
	t.Helper()
	other := openURL(t, mcURL(srv, "pin=off"))
	deadline := time.Now().Add(d)
	for {
		lease, err := other.TryAcquire(ctxT(t, 5*time.Second), key, distlock.WithTTL(5*time.Second))
		if err == nil {
			_ = lease.Release(ctxT(t, 5*time.Second))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after Close, %s is still on the server: %v", d, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCloseWithRequestInFlightLeavesNoLock: the acquisition's request is
// held longer than gomemcache's I/O timeout, so the driver itself sees an
// I/O error and starts the undo of an ambiguous write; the Locker is closed
// right after the caller's ctx ended. The request lands after the undo's
// first tries: the undo must keep looking (while the server answers)
// although Close began, not leave the lock for its 10-minute TTL.
func TestCloseWithRequestInFlightLeavesNoLock(t *testing.T) {
	srv, p, l, key := warmProxied(t, "close-inflight")
	var err error
	p.SetScope(netfault.OpenConns)
	p.SetLatencyDir(netfault.Request, 900*time.Millisecond) // past the 500ms I/O timeout; new connections pass
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
	_, err = l.TryAcquire(ctx, key, distlock.WithTTL(10*time.Minute))
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "TryAcquire with its request in flight: %v, want the ctx error", err)
	start := time.Now()
	require.NoError(t, l.Close())
	t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
	expectFreedWithin(t, srv, key, 6*time.Second, "the in-flight acquisition's lock (TTL 10m)")
}

// warmProxied starts a memcached and returns it with a Locker whose connections to a new memcached go
// through the fault proxy p, with a pooled connection already open, and a
// key named for the test.
func warmProxied(t *testing.T, name string) (*testserver.Server, *netfault.Proxy, *distlock.Locker, string) {
	t.Helper()
	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	p, err := netfault.Listen(srv.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	l, err := distlock.Open(ctxT(t, 10*time.Second), "memcached://"+p.Addr()+"/?pin=off")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	key := name + "-" + t.Name()
	lease, err := l.TryAcquire(ctxT(t, 5*time.Second), key) // opens the connection
	require.NoError(t, err)
	require.NoError(t, lease.Release(ctxT(t, 5*time.Second)))
	return srv, p, l, key
}

// The ambiguous acquire (PITFALLS, every backend): the add reaches a server
// that answers only after the client gave up. The lock it creates must not
// block others until its TTL (here a minute): the background undo removes
// it once the server answers.
func TestAmbiguousAcquire(t *testing.T) {
	conformance.Parallel(t)
	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	admin := adminClient(t, srv.Addr())
	l := openURL(t, mcURL(srv, "timeout=500ms"))
	warm, err := l.TryAcquire(ctxT(t, 5*time.Second), "warm")
	require.NoError(t, err)
	_ = warm.Release(ctxT(t, 5*time.Second))
	pause(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = l.TryAcquire(ctx, "ambiguous", distlock.WithTTL(time.Minute))
	assert.ErrorIs(t, err, context.DeadlineExceeded, "TryAcquire against a stopped server = %v, want the ctx error", err)
	// Past the client's I/O timeout: gomemcache has closed the connection,
	// but the add sits unread in the server's socket buffer.
	time.Sleep(1500 * time.Millisecond)
	require.NoError(t, srv.Resume())
	resumed := time.Now()
	seen := false
	other := openURL(t, mcURL(srv, ""))
	if !waitFor(10*time.Second, func() bool {
		if _, err := admin.Get(ItemKey(DefaultPrefix, "ambiguous")); err == nil {
			seen = true
		}
		lease, err := other.TryAcquire(ctxT(t, 5*time.Second), "ambiguous")
		if err != nil {
			return false
		}
		_ = lease.Release(ctxT(t, 5*time.Second))
		return true
	}) {
		t.Fatalf("the lock of an abandoned acquire (TTL 1m) still blocks others 10s after the server resumed")
	}
	t.Logf("free %v after the server resumed (the late add was seen: %v)", time.Since(resumed).Round(time.Millisecond), seen)
}
