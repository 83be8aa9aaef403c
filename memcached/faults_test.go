package memcached

import (
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fillSlab stores items shaped like the lock item (same key and value
// length, so the same slab class) through one pipelined connection, n at a
// time, and returns how many the server refused with SERVER_ERROR.
func fillSlab(t *testing.T, addr string, keyLen, valueLen, from, n int) (refused int) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	value := strings.Repeat("f", valueLen)
	w := make([]byte, 0, 1<<20)
	r := make([]byte, 64<<10)
	for i := from; i < from+n; i++ {
		k := "fill" + strings.Repeat("0", 20) + strconv.Itoa(i)
		k = k + strings.Repeat("x", max(keyLen-len(k), 0))
		w = append(w, "set "+k+" 0 0 "+strconv.Itoa(valueLen)+"\r\n"+value+"\r\n"...)
	}
	if _, err := c.Write(w); err != nil {
		t.Fatal(err)
	}
	var buf []byte
	lines := 0
	for lines < n {
		m, err := c.Read(r)
		if err != nil {
			t.Fatalf("fill: %v after %d replies", err, lines)
		}
		buf = append(buf, r[:m]...)
		for {
			// bytes, not strings: converting buf copies it, once per
			// reply line, which made a fill quadratic (seconds under -race).
			i := bytes.Index(buf, []byte("\r\n"))
			if i < 0 {
				break
			}
			if bytes.HasPrefix(buf[:i], []byte("SERVER_ERROR")) {
				refused++
			}
			buf = buf[i+2:]
			lines++
		}
	}
	return refused
}

// Eviction: memcached's LRU drops a live lock silently when its slab class
// fills. The holder's lease ends at its next refresh — and, as documented,
// another owner can acquire the lock before that refresh runs.
func TestEviction(t *testing.T) {
	conformance.Parallel(t)
	srv := testserver.Memcached(t, testserver.MemcachedConfig{MemoryMB: 2})
	admin := adminClient(t, srv.Addr())
	a, b := openURL(t, mcURL(srv, "")), openURL(t, mcURL(srv, ""))
	key := "evicted"
	ik := ItemKey(DefaultPrefix, key)
	// TTL 12s: the first automatic refresh runs about 4s after the grant.
	lease, err := a.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithTTL(12*time.Second))
	require.NoError(t, err)
	granted := time.Now()
	_, it := readRecord(t, admin, ik)
	evicted := false
	for i := 0; i < 10 && !evicted; i++ {
		fillSlab(t, srv.Addr(), len(ik), len(it.Value), i*10000, 10000)
		_, err := admin.Get(ik)
		evicted = errors.Is(err, memcache.ErrCacheMiss)
	}
	require.True(t, evicted, "lock item not evicted after filling its slab class")
	if time.Since(granted) > 3500*time.Millisecond {
		t.Skipf("filling took %v, past the first refresh: the window is not observable", time.Since(granted))
	}
	// Documented unsafe window: the item is gone, the holder does not know.
	require.NoError(t, lease.Err(), "lease already ended before its refresh")
	other, err := b.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithTTL(time.Minute), distlock.WithAutoRefresh(false))
	require.NoError(t, err, "second owner after the eviction")
	t.Logf("documented: after the eviction a second owner acquired while the first lease still looked valid (Err=%v)", lease.Err())
	select {
	case <-lease.Done():
		t.Logf("first lease ended %v after the grant: %v", time.Since(granted).Round(time.Millisecond), lease.Err())
	case <-time.After(slack.D(10 * time.Second)):
		t.Fatalf("first lease still open %v after the grant: its refresh must find the lock gone", slack.D(10*time.Second))
	}
	assert.ErrorIs(t, lease.Err(), distlock.ErrLockLost, "first lease ended")
	assert.NoError(t, other.Release(ctxT(t, 5*time.Second)), "second owner's Release")
}

// With -M memcached refuses to store instead of evicting: the lock item
// survives a full slab class, and the refusals — SERVER_ERROR out of memory
// — are ErrUnavailable, never "busy". The held lock cannot be refreshed
// either (cas needs a free chunk), but the meta release needs no memory.
func TestNoEvict(t *testing.T) {
	conformance.Parallel(t)
	srv := testserver.Memcached(t, testserver.MemcachedConfig{MemoryMB: 2, NoEvict: true})
	admin := adminClient(t, srv.Addr())
	a, b := openURL(t, mcURL(srv, "")), openURL(t, mcURL(srv, ""))
	ctx := ctxT(t, time.Minute)
	// Pin the server for b before memory runs out (the pin record is an
	// item too).
	warm, err := b.TryAcquire(ctx, "warm-up")
	require.NoError(t, err)
	_ = warm.Release(ctx)
	key := "kept"
	ik := ItemKey(DefaultPrefix, key)
	lease, err := a.TryAcquire(ctx, key, distlock.WithTTL(time.Minute), distlock.WithAutoRefresh(false))
	require.NoError(t, err)
	_, it := readRecord(t, admin, ik)
	refused := 0
	for i := 0; i < 10 && refused == 0; i++ {
		refused = fillSlab(t, srv.Addr(), len(ik), len(it.Value), i*10000, 10000)
	}
	if refused == 0 {
		t.Fatalf("memcached -M never refused a store")
	}
	if _, err := admin.Get(ik); err != nil {
		t.Fatalf("lock item gone under -M: %v", err)
	}
	_, err = b.TryAcquire(ctx, "new-lock")
	if !errors.Is(err, distlock.ErrUnavailable) || errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("acquire with memory full = %v, want ErrUnavailable (not ErrNotAcquired)", err)
	}
	assert.Contains(t, err.Error(), "SERVER_ERROR out of memory", "error %q does not carry memcached's reply", err)
	if err := lease.Refresh(ctx, time.Minute); !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("refresh with memory full = %v, want ErrUnavailable", err)
	} else {
		t.Logf("documented: with -M and a full slab class the refresh fails: %v", err)
	}
	assert.NoError(t, lease.Err(), "lease ended after a transient refresh failure")
	if _, err := admin.Get(ik); err != nil {
		t.Fatalf("lock item gone after the failed refresh: %v", err)
	}
	assert.NoError(t, lease.Release(ctx), "meta release with memory full")
	if _, err := admin.Get(ik); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("lock item after release: %v, want a miss", err)
	}
}

// A restart empties memcached: the holder's Done closes at its next
// refresh, nothing panics, and the Locker works once the server is back.
// In between, another owner can acquire (documented).
func TestRestartWhileHeld(t *testing.T) {
	conformance.Parallel(t)
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	a, b := openURL(t, mcURL(srv, "")), openURL(t, mcURL(srv, ""))
	admin := adminClient(t, srv.Addr())
	key := "restart"
	lease, err := a.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithTTL(9*time.Second))
	require.NoError(t, err)
	for i := range 50 { // move the CAS counter along
		_ = admin.Set(&memcache.Item{Key: "counter/" + strconv.Itoa(i), Value: []byte("x"), Expiration: 60})
	}
	_, it := readRecord(t, admin, ItemKey(DefaultPrefix, key))
	require.NoError(t, admin.Set(&memcache.Item{Key: "cas-probe", Value: []byte("x"), Expiration: 60}))
	probe, err := admin.Get("cas-probe")
	require.NoError(t, err)
	require.NoError(t, srv.Restart(ctxT(t, time.Minute)))
	// CAS values start again after a restart: they cannot be fencing
	// tokens.
	_ = admin.Close() // its pooled connections died with the server
	require.NoError(t, admin.Set(&memcache.Item{Key: "cas-probe", Value: []byte("x"), Expiration: 60}))
	if again, err := admin.Get("cas-probe"); err != nil || again.CasID >= probe.CasID {
		t.Errorf("CAS after the restart %v (%v), before %d: want it to start again", again, err, probe.CasID)
	} else {
		t.Logf("CAS values: lock item %d, probe %d before the restart; probe %d after", it.CasID, probe.CasID, again.CasID)
	}
	restarted := time.Now()
	other, err := b.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithAutoRefresh(false))
	require.NoError(t, err, "second owner after the restart")
	t.Logf("documented: after the restart a second owner acquired while the first lease's Err was %v", lease.Err())
	assert.NoError(t, other.Release(ctxT(t, 5*time.Second)), "second owner's Release")
	select {
	case <-lease.Done():
		t.Logf("first lease ended %v after the restart: %v", time.Since(restarted).Round(time.Millisecond), lease.Err())
	case <-time.After(15 * time.Second):
		t.Fatalf("first lease still open 15s after the restart (TTL 9s, refresh every 3s)")
	}
	assert.ErrorIs(t, lease.Err(), distlock.ErrLockLost, "first lease ended")
	// The Locker keeps working: its dead pooled connections are replaced.
	for i := range 3 {
		l2, err := a.TryAcquire(ctxT(t, 10*time.Second), key+"/after")
		require.NoError(t, err, "TryAcquire %d after the restart", i)
		require.NoError(t, l2.Release(ctxT(t, 5*time.Second)), "Release %d after the restart", i)
	}
}

// flush_all drops every lock like a restart: the holder learns it at its
// next refresh.
func TestFlushAll(t *testing.T) {
	conformance.Parallel(t)
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	admin := adminClient(t, srv.Addr())
	a := openURL(t, mcURL(srv, ""))
	if caps := a.Capabilities(); caps.Fencing || caps.Durable || caps.Notify || caps.Fair || caps.SessionBound || !caps.Expiring || !caps.Reentrant {
		t.Errorf("capabilities %+v, want Expiring and Reentrant only", caps)
	}
	lease, err := a.TryAcquire(ctxT(t, 10*time.Second), "flushed", distlock.WithTTL(3*time.Second))
	require.NoError(t, err)
	assert.Equal(t, uint64(0), lease.Token(), "Token() = %d without fencing, want 0", lease.Token())
	require.NoError(t, admin.FlushAll())
	select {
	case <-lease.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("lease still open 5s after flush_all (refresh every 1s)")
	}
	assert.ErrorIs(t, lease.Err(), distlock.ErrLockLost, "lease ended")
}

// A server that is down while a lease is held: refreshes fail with
// ErrUnavailable and the lease ends at its validity deadline (ttl − 1s),
// before any other owner could acquire; the Locker recovers afterwards.
func TestDownWhileHeld(t *testing.T) {
	conformance.Parallel(t)
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	a := openURL(t, mcURL(srv, ""))
	lease, err := a.TryAcquire(ctxT(t, 10*time.Second), "down", distlock.WithTTL(3*time.Second))
	require.NoError(t, err)
	deadline := lease.Deadline()
	require.NoError(t, srv.Kill())
	select {
	case <-lease.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("lease still open 10s after the server died")
	}
	if late := time.Since(deadline); late > time.Second {
		t.Errorf("lease ended %v after its validity deadline", late)
	}
	assert.ErrorIs(t, lease.Err(), distlock.ErrLockLost, "lease ended")
	if _, err := a.TryAcquire(ctxT(t, 2*time.Second), "down/2"); !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("TryAcquire with the server down = %v, want ErrUnavailable", err)
	}
	require.NoError(t, srv.Restart(ctxT(t, time.Minute)))
	l2, err := a.TryAcquire(ctxT(t, 10*time.Second), "down")
	require.NoError(t, err, "TryAcquire after the server came back")
	_ = l2.Release(ctxT(t, 5*time.Second))
}

// An unreachable server gives ErrUnavailable within the caller's context:
// a closed port at once, a stopped (SIGSTOP) server after the client's I/O
// timeout, and the context's own error if that comes first.
func TestUnreachable(t *testing.T) {
	conformance.Parallel(t)
	l := openURL(t, closedPortURL(t))
	start := time.Now()
	_, err := l.Acquire(ctxT(t, 2*time.Second), "k")
	assert.ErrorIs(t, err, distlock.ErrUnavailable, "closed port")
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Errorf("closed port: the client's error is not reachable with errors.As: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("closed port: answered after %v", took)
	}

	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	p := openURL(t, mcURL(srv, "timeout=300ms"))
	warm, err := p.TryAcquire(ctxT(t, 5*time.Second), "warm")
	require.NoError(t, err)
	_ = warm.Release(ctxT(t, 5*time.Second))
	pause(t, srv)
	start = time.Now()
	_, err = p.TryAcquire(ctxT(t, 5*time.Second), "k")
	assert.ErrorIs(t, err, distlock.ErrUnavailable, "stopped server")
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Errorf("stopped server: want the client's timeout reachable with errors.As, got %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("stopped server: answered after %v with a 300ms I/O timeout", took)
	}
	start = time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = p.Acquire(ctx, "k2")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("stopped server, short ctx: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("stopped server, short ctx: answered after %v", took)
	}
	require.NoError(t, srv.Resume())
	// Nothing is left behind by the attempts whose outcome was unknown.
	other := openURL(t, mcURL(srv, ""))
	for _, k := range []string{"k", "k2"} {
		if !waitFor(10*time.Second, func() bool {
			lease, err := other.TryAcquire(ctxT(t, 5*time.Second), k)
			if err != nil {
				return false
			}
			_ = lease.Release(ctxT(t, 5*time.Second))
			return true
		}) {
			t.Errorf("%s still held 10s after the server resumed", k)
		}
	}
}

// Close leaves no goroutine behind — not even the background work of an
// abandoned acquisition — and releases held locks on the server.
func TestNoLeaks(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	admin := adminClient(t, srv.Addr())
	runtime.GC()
	before := runtime.NumGoroutine()
	l, err := distlock.Open(ctxT(t, 10*time.Second), mcURL(srv, "timeout=500ms"))
	require.NoError(t, err)
	ctx := ctxT(t, time.Minute)
	held, err := l.TryAcquire(ctx, "leak/held", distlock.WithTTL(3*time.Second))
	require.NoError(t, err)
	for range 10 {
		lease, err := l.Acquire(ctx, "leak/cycle")
		require.NoError(t, err)
		_ = lease.Release(ctx)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, "leak/held")
		waiting <- err
	}()
	// An abandoned acquisition against a stopped server.
	pause(t, srv)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, _ = l.TryAcquire(short, "leak/abandoned")
	cancel()
	require.NoError(t, srv.Resume())
	// The held lease refreshes meanwhile (every second): its record's
	// expiry moves on.
	heldKey := ItemKey(DefaultPrefix, "leak/held")
	first, _ := readRecord(t, admin, heldKey)
	if !waitFor(5*time.Second, func() bool {
		it, err := admin.Get(heldKey)
		if err != nil {
			return false
		}
		rec, ok := decodeRecord(it.Value)
		return ok && rec.expMs > first.expMs
	}) {
		t.Errorf("the held lease was not refreshed within 5s")
	}
	require.NoError(t, l.Close(), "Close")
	assert.ErrorIs(t, <-waiting, distlock.ErrClosed, "waiting Acquire after Close")
	assert.ErrorIs(t, held.Err(), distlock.ErrClosed, "held lease after Close")
	if _, err := admin.Get(ItemKey(DefaultPrefix, "leak/held")); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("held lock left on the server after Close: %v", err)
	}
	if !waitFor(5*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
	}
}
