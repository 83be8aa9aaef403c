package memcached

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/history"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidity(t *testing.T) {
	d := &driver{}
	for _, c := range []struct {
		ttl  time.Duration
		want time.Duration // 0: ErrInvalidTTL
	}{
		{time.Nanosecond, 0},
		{999 * time.Millisecond, 0},
		{time.Second, 0},
		{1500 * time.Millisecond, 0},
		{2*time.Second - 1, 0},
		{2 * time.Second, time.Second},
		{2*time.Second + time.Millisecond, 0},
		{3 * time.Second, 2 * time.Second},
		{15 * time.Second, 14 * time.Second},
		{MaxTTL - time.Second, MaxTTL - 2*time.Second},
		{MaxTTL, MaxTTL - 2*time.Second}, // no room for the tick of padding
		{MaxTTL + time.Second, 0},
		{MaxTTL + time.Nanosecond, 0},
		{365 * 24 * time.Hour, 0},
		{math.MaxInt64, 0},
		{0, 0},
		{-time.Second, 0},
	} {
		got, err := d.Validity(c.ttl)
		if c.want == 0 {
			assert.ErrorIs(t, err, backend.ErrInvalidTTL, "Validity(%v) = %v", c.ttl, got)
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Validity(%v) = %v, %v; want %v", c.ttl, got, err, c.want)
		}
	}
	if got := expSeconds(1000, 0); got != 2 {
		t.Errorf("expSeconds(1s) = %d, want 1s plus a tick", got)
	}
	if got := expSeconds(1001, 0); got != 3 {
		t.Errorf("expSeconds(1.001s) = %d, want rounded up to 2, plus a tick", got)
	}
	assert.Equal(t, int32(3), ttlSeconds(2*time.Second), "ttlSeconds(2s)")
	assert.Equal(t, int32(2592000), ttlSeconds(MaxTTL), "ttlSeconds(30 days)")
	assert.Equal(t, int32(1), expSeconds(0, 5000), "expSeconds(past)")
	if got := expSeconds(int64(MaxTTL/time.Millisecond)+1, 0); got != 2592000 {
		t.Errorf("expSeconds(30d+1ms) = %d, want clamped to 2592000 (more is an absolute time)", got)
	}
	if got := holdSeconds(2000, 0); got != 4 {
		t.Errorf("holdSeconds(2s) = %d, want 2s plus two ticks (rounding and a clock jump)", got)
	}
	if got := holdSeconds(int64(MaxTTL/time.Millisecond), 0); got != 2592000 {
		t.Errorf("holdSeconds(30d) = %d, want clamped to 2592000", got)
	}
}

// TTL edge cases against the server: 1s is refused, 2s works with a
// validity of 1s, 30 days is stored as a relative expiry (a longer one would
// be an absolute time in 1970 and expire at once), 30 days + 1s and huge
// values are refused, and neither a nested acquire nor a refresh with a
// shorter TTL shortens the expiry.
func TestTTLEdges(t *testing.T) {
	conformance.Parallel(t)
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	l := openURL(t, mcURL(srv, ""))
	d := openDriver(t, mcURL(srv, ""))
	ctx := ctxT(t, time.Minute)
	for _, ttl := range []time.Duration{time.Second, 1500 * time.Millisecond, MaxTTL + time.Second, 100 * 365 * 24 * time.Hour, math.MaxInt64} {
		if lease, err := l.TryAcquire(ctx, "ttl/bad", distlock.WithTTL(ttl)); !errors.Is(err, distlock.ErrInvalidTTL) {
			if lease != nil {
				_ = lease.Release(ctx)
			}
			t.Errorf("TTL %v: %v, want ErrInvalidTTL", ttl, err)
		}
		// The driver refuses them too when called directly.
		if _, err := d.TryAcquire(ctx, req("ttl/bad", "x", ttl)); !errors.Is(err, backend.ErrInvalidTTL) {
			t.Errorf("driver TTL %v: %v, want ErrInvalidTTL", ttl, err)
		}
	}

	start := time.Now()
	lease, err := l.TryAcquire(ctx, "ttl/2s", distlock.WithTTL(2*time.Second), distlock.WithAutoRefresh(false))
	require.NoError(t, err, "TTL 2s")
	if v := lease.Deadline().Sub(start); v > 1100*time.Millisecond || v < time.Second {
		t.Errorf("TTL 2s: validity %v, want 1s", v)
	}
	if secs, ok := remainingTTL(t, srv.Addr(), ItemKey(DefaultPrefix, "ttl/2s")); !ok || secs > 3 {
		t.Errorf("TTL 2s: server TTL %d (present %v)", secs, ok)
	}
	_ = lease.Release(ctx)

	// 30 days less a second: the tick of padding just fits.
	edge, err := l.TryAcquire(ctx, "ttl/30d-1s", distlock.WithTTL(MaxTTL-time.Second))
	require.NoError(t, err, "TTL 30 days - 1s")
	if secs, ok := remainingTTL(t, srv.Addr(), ItemKey(DefaultPrefix, "ttl/30d-1s")); !ok || secs < 2592000-5 || secs > 2592000 {
		t.Errorf("TTL 30 days - 1s: server TTL %d (present %v), want about 2592000", secs, ok)
	}
	_ = edge.Release(ctx)

	ik := ItemKey(DefaultPrefix, "ttl/30d")
	lease, err = l.TryAcquire(ctx, "ttl/30d", distlock.WithTTL(MaxTTL), distlock.WithOwner("long"))
	require.NoError(t, err, "TTL 30 days")
	secs, ok := remainingTTL(t, srv.Addr(), ik)
	if !ok || secs < 2592000-5 || secs > 2592000 {
		t.Errorf("TTL 30 days: server TTL %d (present %v), want about 2592000", secs, ok)
	}
	// Refresh at the limit: expiry stays relative (2592000), not 2592001.
	time.Sleep(1100 * time.Millisecond)
	require.NoError(t, lease.Refresh(ctx, MaxTTL), "Refresh(30 days)")
	if secs, ok := remainingTTL(t, srv.Addr(), ik); !ok || secs < 2592000-5 {
		t.Errorf("after Refresh(30 days): server TTL %d (present %v)", secs, ok)
	}
	assert.ErrorIs(t, lease.Refresh(ctx, MaxTTL+time.Second), distlock.ErrInvalidTTL, "Refresh(30 days + 1s)")
	// A nested acquire and a refresh with a short TTL never shorten it.
	nested, err := l.TryAcquire(ctx, "ttl/30d", distlock.WithTTL(2*time.Second), distlock.WithOwner("long"))
	require.NoError(t, err, "nested acquire")
	require.NoError(t, nested.Refresh(ctx, 2*time.Second), "nested refresh")
	if secs, ok := remainingTTL(t, srv.Addr(), ik); !ok || secs < 2592000-10 {
		t.Errorf("after a nested 2s acquire and refresh: server TTL %d (present %v), want still about 30 days", secs, ok)
	}
	_ = nested.Release(ctx)
	if secs, ok := remainingTTL(t, srv.Addr(), ik); !ok || secs < 2592000-10 {
		t.Errorf("after the nested release: server TTL %d (present %v), want still about 30 days", secs, ok)
	}
	require.NoError(t, lease.Release(ctx))
}

// mono is CLOCK_MONOTONIC in seconds, the clock memcached ticks on.
func mono() float64 { return float64(history.Now()) / 1e9 }

// sleepUntil sleeps until CLOCK_MONOTONIC reads at.
func sleepUntil(at float64) {
	if d := at - mono(); d > 0 {
		time.Sleep(time.Duration(d * float64(time.Second)))
	}
}

// tickPhase finds when memcached's clock ticks, as the fraction of a
// CLOCK_MONOTONIC second: an item stored with expiry 1 vanishes at the next
// tick.
func tickPhase(t *testing.T, admin *memcache.Client, addr string) float64 {
	t.Helper()
	require.NoError(t, admin.Set(&memcache.Item{Key: "phase-probe", Value: []byte("x"), Expiration: 1}))
	deadline := mono() + 3
	for mono() < deadline {
		if _, ok := remainingTTL(t, addr, "phase-probe"); !ok {
			_, frac := math.Modf(mono())
			return frac
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("probe with expiry 1 still present after 3s")
	return 0
}

// memcached's clock jumps by two seconds when its tick phase crosses a
// whole second (ticks drift later, ~1.5 ms each on a busy machine; a stall
// of the server does it at once). An item stored with expiry n just before
// such a jump lives less than n−1 seconds — with expiry 2 a measured 11 ms —
// so a lease counting ttl − 1s over an expiry of ttl would outlive its lock.
// The backend sends ttl + 1s: the lock outlives the validity even across
// the jump. Here the jump is made on purpose, by stopping memcached across
// its tick and the following whole second.
func TestClockJump(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	admin := adminClient(t, srv.Addr())
	d := openDriver(t, mcURL(srv, ""))
	ctx := ctxT(t, time.Minute)
	// Just before a tick: store a raw item with expiry 2 and take a lock
	// with TTL 2s (validity 1s).
	sent := clockJump(t, srv, admin, 0.15, func() {
		if err := admin.Set(&memcache.Item{Key: "unpadded", Value: []byte("x"), Expiration: 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.TryAcquire(ctx, req("jump", "holder", 2*time.Second)); err != nil {
			t.Fatal(err)
		}
	})
	// The overdue tick runs once memcached is scheduled again: the item
	// with expiry 2 is gone before it is 0.98s old (without the jump it
	// would live at least 1s).
	rawAlive := true
	for rawAlive && mono() < sent+0.98 {
		if _, rawAlive = remainingTTL(t, srv.Addr(), "unpadded"); rawAlive {
			time.Sleep(2 * time.Millisecond)
		}
	}
	rawLife := mono() - sent
	if rawAlive {
		t.Errorf("the item with expiry 2 survived the clock jump (%.3fs after it was stored)", rawLife)
	} else {
		t.Logf("item with expiry 2 gone %.3fs after it was stored (less than n−1 = 1s)", rawLife)
	}
	// The lock (expiry 3) is still there at the end of its validity.
	sleepUntil(sent + 0.98)
	if _, ok := remainingTTL(t, srv.Addr(), ItemKey(DefaultPrefix, "jump")); !ok {
		t.Errorf("lock with TTL 2s gone %.3fs after it was taken, within its 1s validity", mono()-sent)
	}
}

// clockJump makes memcached's clock jump by two seconds right after store
// ran, lead seconds before memcached's tick, and returns when store
// started (CLOCK_MONOTONIC seconds). It sets the tick phase near 0.6s
// (after a stop longer than a second the overdue tick runs at the moment
// of the resume), runs store just before the tick due at M+phase, then
// stops memcached across that tick and the next whole second: the tick
// then runs at M+1.02, and the clock jumps from M−1 to M+1.
func clockJump(t *testing.T, srv *testserver.Server, admin *memcache.Client, lead float64, store func()) (sent float64) {
	t.Helper()
	phase := tickPhase(t, admin, srv.Addr())
	if phase < 0.4 || phase > 0.8 {
		pause(t, srv)
		start := mono()
		next := math.Floor(start) + 1.6
		if next-start < 1.1 {
			next++
		}
		sleepUntil(next)
		require.NoError(t, srv.Resume())
		phase = tickPhase(t, admin, srv.Addr())
	}
	t.Logf("memcached ticks at phase %.3f", phase)
	if phase < 0.3 || phase > 0.9 {
		t.Skipf("could not set memcached's tick phase (got %.3f)", phase)
	}
	m := math.Floor(mono()) + 1
	sleepUntil(m + phase - lead)
	sent = mono()
	store()
	pause(t, srv)
	if now := mono(); now > m+phase {
		t.Skipf("stopped memcached only at %.3f, after its tick at %.3f: machine too slow", now, m+phase)
	}
	sleepUntil(m + 1.02)
	require.NoError(t, srv.Resume())
	return sent
}

// TestMinHoldClockJump: a lock released within its minimum hold stays
// taken until the minimum hold ends even if memcached's clock jumps
// meanwhile. A minimum hold has no validity margin to absorb the jump, as
// a lease has: its expiry needs the second tick. With one tick (expiry 3
// for a 2s hold) the item was gone 1.7s after the release.
func TestMinHoldClockJump(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	admin := adminClient(t, srv.Addr())
	d := openDriver(t, mcURL(srv, ""))
	ctx := ctxT(t, time.Minute)
	const hold = 2 * time.Second
	var released float64
	clockJump(t, srv, admin, 0.3, func() {
		l, err := d.TryAcquire(ctx, req("minhold-jump", "holder", 2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		released = mono()
		if err := d.ReleaseAfter(ctx, l, hold); err != nil {
			t.Fatal(err)
		}
	})
	// The minimum hold runs until at least released + hold. An answer
	// that the item is gone, received before then, was given before then.
	ik := ItemKey(DefaultPrefix, "minhold-jump")
	end := released + hold.Seconds()
	for mono() < end {
		_, ok := remainingTTL(t, srv.Addr(), ik)
		if answered := mono(); !ok && answered < end {
			t.Fatalf("lock gone %.3fs after its release, within its %v minimum hold, across a jump of memcached's clock", answered-released, hold)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
