package memcached

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/testserver"
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
			if !errors.Is(err, backend.ErrInvalidTTL) {
				t.Errorf("Validity(%v) = %v, %v; want ErrInvalidTTL", c.ttl, got, err)
			}
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
	if got := ttlSeconds(2 * time.Second); got != 3 {
		t.Errorf("ttlSeconds(2s) = %d, want 3", got)
	}
	if got := ttlSeconds(MaxTTL); got != 2592000 {
		t.Errorf("ttlSeconds(30 days) = %d, want 2592000", got)
	}
	if got := expSeconds(0, 5000); got != 1 {
		t.Errorf("expSeconds(past) = %d, want 1", got)
	}
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
	if err != nil {
		t.Fatalf("TTL 2s: %v", err)
	}
	if v := lease.Deadline().Sub(start); v > 1100*time.Millisecond || v < time.Second {
		t.Errorf("TTL 2s: validity %v, want 1s", v)
	}
	if secs, ok := remainingTTL(t, srv.Addr(), ItemKey(DefaultPrefix, "ttl/2s")); !ok || secs > 3 {
		t.Errorf("TTL 2s: server TTL %d (present %v)", secs, ok)
	}
	_ = lease.Release(ctx)

	// 30 days less a second: the tick of padding just fits.
	edge, err := l.TryAcquire(ctx, "ttl/30d-1s", distlock.WithTTL(MaxTTL-time.Second))
	if err != nil {
		t.Fatalf("TTL 30 days - 1s: %v", err)
	}
	if secs, ok := remainingTTL(t, srv.Addr(), ItemKey(DefaultPrefix, "ttl/30d-1s")); !ok || secs < 2592000-5 || secs > 2592000 {
		t.Errorf("TTL 30 days - 1s: server TTL %d (present %v), want about 2592000", secs, ok)
	}
	_ = edge.Release(ctx)

	ik := ItemKey(DefaultPrefix, "ttl/30d")
	lease, err = l.TryAcquire(ctx, "ttl/30d", distlock.WithTTL(MaxTTL), distlock.WithOwner("long"))
	if err != nil {
		t.Fatalf("TTL 30 days: %v", err)
	}
	secs, ok := remainingTTL(t, srv.Addr(), ik)
	if !ok || secs < 2592000-5 || secs > 2592000 {
		t.Errorf("TTL 30 days: server TTL %d (present %v), want about 2592000", secs, ok)
	}
	// Refresh at the limit: expiry stays relative (2592000), not 2592001.
	time.Sleep(1100 * time.Millisecond)
	if err := lease.Refresh(ctx, MaxTTL); err != nil {
		t.Fatalf("Refresh(30 days): %v", err)
	}
	if secs, ok := remainingTTL(t, srv.Addr(), ik); !ok || secs < 2592000-5 {
		t.Errorf("after Refresh(30 days): server TTL %d (present %v)", secs, ok)
	}
	if err := lease.Refresh(ctx, MaxTTL+time.Second); !errors.Is(err, distlock.ErrInvalidTTL) {
		t.Errorf("Refresh(30 days + 1s) = %v, want ErrInvalidTTL", err)
	}
	// A nested acquire and a refresh with a short TTL never shorten it.
	nested, err := l.TryAcquire(ctx, "ttl/30d", distlock.WithTTL(2*time.Second), distlock.WithOwner("long"))
	if err != nil {
		t.Fatalf("nested acquire: %v", err)
	}
	if err := nested.Refresh(ctx, 2*time.Second); err != nil {
		t.Fatalf("nested refresh: %v", err)
	}
	if secs, ok := remainingTTL(t, srv.Addr(), ik); !ok || secs < 2592000-10 {
		t.Errorf("after a nested 2s acquire and refresh: server TTL %d (present %v), want still about 30 days", secs, ok)
	}
	_ = nested.Release(ctx)
	if secs, ok := remainingTTL(t, srv.Addr(), ik); !ok || secs < 2592000-10 {
		t.Errorf("after the nested release: server TTL %d (present %v), want still about 30 days", secs, ok)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
