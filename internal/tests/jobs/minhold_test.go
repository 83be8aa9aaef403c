package jobs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/memcached"
	_ "github.com/distlock/distlock/memory"
	_ "github.com/distlock/distlock/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMinHoldLeftoverHoldOutlivesLaterRelease: a lease released within its
// minimum hold leaves its hold in the backend (ReleaseAfter keeps the last
// hold and only moves the expiry). A later acquisition by the same owner
// (WithOwner, as a job runner naming itself does) during that minimum hold
// nests onto the leftover hold, so its own Release does not free the lock:
// the lock stays taken until that later lease's TTL, long after both the
// minimum hold and the later lease have ended. WithMinHold says "a job that
// runs longer than d is unaffected: the lock is released when the lease
// is"; here the lock outlived every lease and every minimum hold. Fixed: a
// backend with backend.DelayedReleaser (memory) gives the hold up and keeps
// only the minimum hold; the others refuse WithMinHold with WithOwner.
func TestMinHoldLeftoverHoldOutlivesLaterRelease(t *testing.T) {
	for _, c := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"memory", func(t *testing.T) string { return "mem://minhold-leftover" }},
		{"redis", func(t *testing.T) string {
			return redisURL(t)
		}},
		{"memcached", func(t *testing.T) string {
			return memcachedURL(t)
		}},
	} {
		t.Run(c.name, func(t *testing.T) { t.Parallel(); minHoldLeftover(t, c.url(t)) })
	}
}

func minHoldLeftover(t *testing.T, url string) {
	ctx := t.Context()
	a, b := openTwo(t, url)
	const hold = 2 * time.Second // whole seconds: memcached's expiry granularity
	first, err := a.TryAcquire(ctx, "job", distlock.WithOwner("host-a"), distlock.WithMinHold(hold))
	if strings.HasPrefix(url, "redlock:") {
		assert.ErrorIs(t, err, distlock.ErrInvalidOption, "WithMinHold with WithOwner on a backend without DelayedReleaser")
		return
	}
	require.NoError(t, err)
	if err := first.Release(ctx); err != nil { // within the minimum hold
		t.Fatal(err)
	}
	// The same owner takes the key again within the minimum hold, with a
	// long TTL and no minimum hold, and releases it after the first hold
	// has passed.
	second, err := a.TryAcquire(ctx, "job", distlock.WithOwner("host-a"), distlock.WithTTL(time.Minute))
	require.NoError(t, err, "same owner within the minimum hold")
	time.Sleep(hold + time.Second)
	require.NoError(t, second.Release(ctx))
	if info, err := b.Inspect(ctx, "job"); err != nil || info.Held {
		t.Errorf("after every lease was released and the minimum hold passed: %+v, %v; want free (the lock is left until the released lease's 1m TTL)", info, err)
	}
	if l, err := b.TryAcquire(ctx, "job"); err != nil {
		t.Errorf("another owner after every release and past the minimum hold: %v, want the lock free", err)
	} else {
		l.Release(ctx)
	}
}

// TestMinHoldNestedReleaseDropsMinimumHold: an owner holds key through
// two reentrant leases; the inner one has a minimum hold and is released
// within it, then the outer one (no minimum hold) is released. The lock
// must stay taken until the inner lease's minimum hold ends (WithMinHold:
// "keeps the lock taken until at least d after the acquisition"), but it
// is freed at once: ReleaseAfter on a non-last hold just drops it.
func TestMinHoldNestedReleaseDropsMinimumHold(t *testing.T) {
	for _, c := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"memory", func(t *testing.T) string { return "mem://minhold-nested" }},
		{"redis", func(t *testing.T) string {
			return redisURL(t)
		}},
		{"memcached", func(t *testing.T) string {
			return memcachedURL(t)
		}},
	} {
		t.Run(c.name, func(t *testing.T) { t.Parallel(); minHoldNested(t, c.url(t)) })
	}
}

func minHoldNested(t *testing.T, url string) {
	a, b := openTwo(t, url)
	ctx := t.Context()
	const hold = 10 * time.Second
	outer, err := a.TryAcquire(ctx, "job", distlock.WithOwner("host-a"))
	require.NoError(t, err)
	start := time.Now()
	inner, err := a.TryAcquire(ctx, "job", distlock.WithOwner("host-a"), distlock.WithMinHold(hold))
	require.NoError(t, err)
	require.NoError(t, inner.Release(ctx))
	require.NoError(t, outer.Release(ctx))
	if l, err := b.TryAcquire(ctx, "job"); err == nil {
		if time.Since(start) < hold {
			t.Errorf("another owner took the lock %v after a nested acquisition with a %v minimum hold", time.Since(start), hold)
		}
		l.Release(ctx)
	}
}

// TestMinHoldEndsBeforeLongTTL: a lease with a 1-minute TTL released
// within its 2s minimum hold frees the lock when the minimum hold ends,
// not at the TTL (WithMinHold: the lock "expires on the server when the
// minimum hold ends"). Before memcached had ReleaseAfter, the release was
// a refresh that never shortens, and the lock stayed for the whole minute.
func TestMinHoldEndsBeforeLongTTL(t *testing.T) {
	for _, c := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"memory", func(t *testing.T) string { return "mem://minhold-exact" }},
		{"redis", func(t *testing.T) string {
			return redisURL(t)
		}},
		{"memcached", func(t *testing.T) string {
			return memcachedURL(t)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // a namespace of its own: it only sleeps beside the others
			a, b := openTwo(t, c.url(t))
			ctx := t.Context()
			lease, err := a.TryAcquire(ctx, "job", distlock.WithTTL(time.Minute), distlock.WithMinHold(2*time.Second))
			require.NoError(t, err)
			require.NoError(t, lease.Release(ctx))
			if _, err := b.TryAcquire(ctx, "job"); !errors.Is(err, distlock.ErrNotAcquired) {
				t.Fatalf("another owner within the minimum hold: %v, want ErrNotAcquired", err)
			}
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			next, err := b.Acquire(wctx, "job")
			require.NoError(t, err, "lock not free 20s after a 2s minimum hold (TTL 1m)")
			_ = next.Release(ctx)
		})
	}
}
