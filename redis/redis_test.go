package redis

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKeysFor(t *testing.T) {
	seen := map[string]string{}
	for _, key := range []string{"a", "A", "a ", "{x}", "}{", "a\x00b", "a\x00c", strings.Repeat("k", 1024), strings.Repeat("k", 1023) + "j", "🔒"} {
		k := redislua.KeysFor("p:", key)
		assert.Len(t, k.Lock, len("p:")+2+redislua.TagLen, "KeysFor(%q).Lock = %q: not fixed length", key, k.Lock)
		if k.Legacy != k.Lock+":fence" || k.Channel != k.Lock+":wake" || k.Name != key {
			t.Errorf("KeysFor(%q) = %+v: names do not share the lock name", key, k)
		}
		if want := "p:fence{" + redislua.SlotTag(redislua.Slot(k.Lock)) + "}"; k.Fence != want {
			t.Errorf("KeysFor(%q).Fence = %q, want the slot's counter %q", key, k.Fence, want)
		}
		tag := k.Lock[strings.IndexByte(k.Lock, '{')+1 : strings.IndexByte(k.Lock, '}')]
		if len(tag) != redislua.TagLen || strings.ContainsAny(tag, "{}") {
			t.Errorf("KeysFor(%q): bad hash tag %q", key, tag)
		}
		if prev, dup := seen[k.Lock]; dup {
			t.Errorf("keys %q and %q map to the same name %q", prev, key, k.Lock)
		}
		seen[k.Lock] = key
	}
	// Whatever braces the prefix has, every name sits in the lock key's
	// slot: the fencing counter too. (Only the fencing counter for a prefix
	// whose first '{' is followed by '}': Redis then hashes whole names,
	// which differ by their suffixes.)
	for _, prefix := range []string{"", "p:", "a{b", "a{}b", "{x}", "}{", "a}b{c", "{", "x{y}z{", "{}"} {
		k := redislua.KeysFor(prefix, "key")
		names := []string{k.Fence, k.Legacy, k.Channel}
		if strings.Contains(prefix, "{}") {
			names = names[:1]
		}
		for _, name := range names {
			assert.Equal(t, redislua.Slot(k.Lock), redislua.Slot(name), "prefix %q: %q and %q in different slots", prefix, name, k.Lock)
		}
	}
}

func TestTTLValidation(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, 30*time.Second)
	for _, ttl := range []time.Duration{time.Microsecond, 999 * time.Microsecond, 1500 * time.Microsecond, 2 * time.Millisecond, time.Second + time.Nanosecond} {
		if _, err := l.TryAcquire(ctx, "ttl", distlock.WithTTL(ttl)); !errors.Is(err, distlock.ErrInvalidTTL) {
			t.Errorf("TryAcquire with TTL %v = %v, want ErrInvalidTTL", ttl, err)
		}
	}
	// 3ms is the minimum: 1ms of validity is left after the drift
	// allowance (too little to acquire through distlock under -race, so
	// check the policy itself).
	if v, err := l.d.Validity(3 * time.Millisecond); err != nil || v != 970*time.Microsecond {
		t.Errorf("Validity(3ms) = %v, %v; want 970µs", v, err)
	}
	lease, err := l.TryAcquire(ctx, "ttl", distlock.WithTTL(1001*time.Millisecond), distlock.WithAutoRefresh(false))
	require.NoError(t, err, "TTL 1001ms")
	_ = lease.Release(ctx)
	lease, err = l.TryAcquire(ctx, "ttl", distlock.WithTTL(time.Minute))
	require.NoError(t, err)
	assert.ErrorIs(t, lease.Refresh(ctx, 1500*time.Microsecond), distlock.ErrInvalidTTL, "Refresh(1.5ms)")
	require.NoError(t, lease.Release(ctx))
	// The driver refuses too, even when called directly.
	if _, err := l.d.TryAcquire(ctx, backend.Request{Key: "ttl", Owner: "o", TTL: 1500 * time.Microsecond}); !errors.Is(err, backend.ErrInvalidTTL) {
		t.Errorf("driver TryAcquire with 1.5ms = %v, want ErrInvalidTTL", err)
	}
}

// TestSeedsExpiryScenario is the seeds' timeline, inspected in Redis: A's
// lock expires, B acquires, A's stale Release leaves B's lock intact.
func TestSeedsExpiryScenario(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	a := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	b := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, time.Minute)
	const key = "seeds/resource"
	name := redislua.KeysFor(redislua.DefaultPrefix, key).Lock

	leaseA, err := a.TryAcquire(ctx, key, distlock.WithTTL(300*time.Millisecond), distlock.WithAutoRefresh(false))
	require.NoError(t, err)
	h := admin.HGetAll(ctx, name).Val()
	if h["o"] != leaseA.Owner() || h["t"] != strconv.FormatUint(leaseA.Token(), 10) || len(holds(h)) != 1 {
		t.Fatalf("A's lock in Redis = %v, want owner %q token %d and one hold", h, leaseA.Owner(), leaseA.Token())
	}
	if pttl := admin.PTTL(ctx, name).Val(); pttl <= 0 || pttl > 300*time.Millisecond {
		t.Fatalf("A's lock PTTL = %v, want (0, 300ms]", pttl)
	}
	select {
	case <-leaseA.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("A's lease not ended after its TTL")
	}
	leaseB, err := b.Acquire(ctx, key, distlock.WithTTL(time.Minute))
	require.NoError(t, err)
	want := map[string]string{"o": leaseB.Owner(), "t": strconv.FormatUint(leaseB.Token(), 10)}
	check := func(when string) {
		t.Helper()
		h := admin.HGetAll(ctx, name).Val()
		if h["o"] != want["o"] || h["t"] != want["t"] || len(holds(h)) != 1 {
			t.Fatalf("%s: lock in Redis = %v, want B's owner %q token %s with one hold", when, h, want["o"], want["t"])
		}
		if pttl := admin.PTTL(ctx, name).Val(); pttl < 50*time.Second {
			t.Fatalf("%s: PTTL = %v, want B's TTL (about 1m)", when, pttl)
		}
	}
	check("after B acquired")
	if leaseB.Token() <= leaseA.Token() {
		t.Errorf("B's token %d not above A's %d", leaseB.Token(), leaseA.Token())
	}
	assert.ErrorIs(t, leaseA.Release(ctx), distlock.ErrNotHeld, "A's stale Release")
	check("after A's stale Release")
	// The driver's own check, bypassing distlock's lease state: A's
	// backend lock (same owner id, old token) must change nothing.
	stale := &lock{d: a.d, keys: redislua.KeysFor(redislua.DefaultPrefix, key), owner: leaseB.Owner(), token: leaseA.Token(), hold: "hstale"}
	assert.ErrorIs(t, stale.Release(ctx), backend.ErrNotHeld, "release with B's owner but A's token")
	assert.ErrorIs(t, stale.Refresh(ctx, time.Hour), backend.ErrNotHeld, "refresh with B's owner but A's token")
	check("after stale driver calls")
	require.NoError(t, leaseB.Release(ctx))
	if n := admin.Exists(ctx, name).Val(); n != 0 {
		t.Errorf("lock key still exists after B's Release")
	}
}

// TestReentrantNeverShortens: a nested acquire or a refresh with a shorter
// TTL keeps the longer expiry; holds are counted in the hash.
func TestReentrantNeverShortens(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, time.Minute)
	name := redislua.KeysFor(redislua.DefaultPrefix, "re").Lock
	me := distlock.WithOwner("me")
	l1, err := l.TryAcquire(ctx, "re", me, distlock.WithTTL(time.Minute), distlock.WithAutoRefresh(false))
	require.NoError(t, err)
	l2, err := l.TryAcquire(ctx, "re", me, distlock.WithTTL(time.Second), distlock.WithAutoRefresh(false))
	require.NoError(t, err)
	if pttl := admin.PTTL(ctx, name).Val(); pttl < 50*time.Second {
		t.Errorf("nested acquire with a 1s TTL shortened the expiry to %v", pttl)
	}
	require.NoError(t, l2.Refresh(ctx, time.Second))
	if pttl := admin.PTTL(ctx, name).Val(); pttl < 50*time.Second {
		t.Errorf("refresh with a 1s TTL shortened the expiry to %v", pttl)
	}
	require.NoError(t, l1.Refresh(ctx, 2*time.Minute))
	if pttl := admin.PTTL(ctx, name).Val(); pttl < 110*time.Second {
		t.Errorf("refresh with 2m: expiry %v", pttl)
	}
	if n := len(holds(admin.HGetAll(ctx, name).Val())); n != 2 {
		t.Errorf("%d holds in the hash, want 2", n)
	}
	require.NoError(t, l1.Release(ctx))
	if n := len(holds(admin.HGetAll(ctx, name).Val())); n != 1 {
		t.Errorf("%d holds after one release, want 1", n)
	}
	require.NoError(t, l2.Release(ctx))
	assert.Equal(t, int64(0), admin.Exists(ctx, name).Val(), "lock key left after the last release")
}

// TestBusyReportsRemainingTTL: TryAcquire on a held lock returns the
// holder's PTTL, which caps a notified waiter's wait: a waiter with a
// one-minute retry policy still takes over a crashed holder's lock (no
// release, so no message) right after its TTL.
func TestBusyReportsRemainingTTL(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	a := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	b := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, time.Minute)
	holder, err := a.TryAcquire(ctx, "busy", distlock.WithTTL(1500*time.Millisecond), distlock.WithAutoRefresh(false))
	require.NoError(t, err)
	_, err = b.TryAcquire(ctx, "busy")
	var busy *backend.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire on a held lock = %v, want a BusyError", err)
	}
	if busy.RetryAfter <= 0 || busy.RetryAfter > 1500*time.Millisecond {
		t.Errorf("RetryAfter = %v, want the holder's remaining TTL (0, 1.5s]", busy.RetryAfter)
	}
	start := time.Now()
	slow := distlock.WithRetry(distlock.Backoff{Min: time.Minute, Max: time.Minute})
	lease, err := b.Acquire(ctx, "busy", slow)
	require.NoError(t, err, "waiter")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("waiter took %v to notice the expired holder (TTL 1.5s)", took)
	}
	assert.ErrorIs(t, holder.Err(), distlock.ErrLockLost, "holder's lease")
	_ = lease.Release(ctx)
}
