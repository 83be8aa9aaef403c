package memcached

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// releaseModes are the URL queries of the two final-release paths, with
// the counter of the path each must use.
var releaseModes = []struct {
	name, query string
	used        *atomic.Int64
}{
	{"meta", "", &releaseStats[ReleaseAuto].metaDeletes},
	{"cas", "release=cas", &releaseStats[ReleaseCAS].tombstones},
}

func inspectT(t *testing.T, l *distlock.Locker, key string) distlock.LockInfo {
	t.Helper()
	info, err := l.Inspect(ctxT(t, 10*time.Second), key)
	require.NoError(t, err, "Inspect(%q)", key)
	return info
}

// TestInspect: another client sees owner, metadata (the first hold's),
// nested holds and the TTL the server counts; Token 0 and Waiters -1.
func TestInspect(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	admin := adminClient(t, srv.Addr())
	holder, operator := openURL(t, mcURL(srv, "")), openURL(t, mcURL(srv, ""))
	const key = "inspect"
	if info := inspectT(t, operator, key); info.Held || info.Waiters != -1 {
		t.Fatalf("Inspect of a free key = %+v", info)
	}
	lease, err := holder.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithOwner("job-1"), distlock.WithMetadata("host=a ✓ pid 7"), distlock.WithTTL(10*time.Second))
	require.NoError(t, err)
	check := func(info distlock.LockInfo, holds int, lo, hi time.Duration) {
		t.Helper()
		if !info.Held || info.Owner != "job-1" || info.Metadata != "host=a ✓ pid 7" || info.Holds != holds || info.Token != 0 || info.Waiters != -1 || info.SessionBound {
			t.Errorf("Inspect = %+v, want job-1 with its metadata, %d holds, no token, Waiters -1", info, holds)
		}
		if info.TTL < lo || info.TTL > hi {
			t.Errorf("Inspect TTL %v, want %v to %v", info.TTL, lo, hi)
		}
	}
	// The server was sent ttl + 1s; it counts whole seconds.
	check(inspectT(t, operator, key), 1, 8*time.Second, 11*time.Second)
	nested, err := holder.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithOwner("job-1"), distlock.WithMetadata("nested"), distlock.WithTTL(10*time.Second))
	require.NoError(t, err)
	check(inspectT(t, operator, key), 2, 8*time.Second, 11*time.Second)
	// The TTL is the server's: touched to 100s behind the record's back,
	// the server's count shows, the record's expiry does not.
	require.NoError(t, admin.Touch(ItemKey(DefaultPrefix, key), 100))
	check(inspectT(t, operator, key), 2, 98*time.Second, 100*time.Second)
	// Without the key's server (New on a client, no WithSelector): the
	// expiry recorded by the last writer, by this machine's clock.
	c := memcache.New(srv.Addr())
	blind, err := New(c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = blind.Close(); _ = c.Close() })
	check(inspectT(t, blind, key), 2, 8*time.Second, 10*time.Second)
	_ = nested.Release(ctxT(t, 10*time.Second))
	check(inspectT(t, operator, key), 1, 1*time.Second, 100*time.Second)
	_ = lease.Release(ctxT(t, 10*time.Second))
	if info := inspectT(t, operator, key); info.Held {
		t.Errorf("Inspect after Release = %+v", info)
	}
}

// TestForceRelease, with each final-release path: the report is the
// holder's, the lock is free at once, and the evicted lease's Refresh and
// Release get ErrNotHeld; the next holder's lock is untouched by them.
func TestForceRelease(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	for _, m := range releaseModes {
		t.Run(m.name, func(t *testing.T) {
			holder, operator := openURL(t, mcURL(srv, m.query)), openURL(t, mcURL(srv, m.query))
			key := "force-" + m.name
			victim, err := holder.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithMetadata("md"), distlock.WithTTL(time.Minute), distlock.WithAutoRefresh(false))
			require.NoError(t, err)
			before := m.used.Load()
			info, err := operator.ForceRelease(ctxT(t, 10*time.Second), key)
			require.NoError(t, err)
			if !info.Held || info.Owner != victim.Owner() || info.Metadata != "md" || info.Holds != 1 || info.TTL <= 0 || info.TTL > 61*time.Second {
				t.Errorf("ForceRelease = %+v, want the victim %q", info, victim.Owner())
			}
			if m.used.Load() == before {
				t.Errorf("ForceRelease did not delete through the %s path", m.name)
			}
			next, err := operator.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithTTL(time.Minute))
			require.NoError(t, err, "TryAcquire after the forced release")
			assert.ErrorIs(t, victim.Refresh(ctxT(t, 10*time.Second), time.Minute), distlock.ErrNotHeld, "evicted Refresh")
			assert.ErrorIs(t, victim.Release(ctxT(t, 10*time.Second)), distlock.ErrNotHeld, "evicted Release")
			if info := inspectT(t, operator, key); info.Owner != next.Owner() {
				t.Errorf("the new holder's lock after the evicted one's calls: %+v", info)
			}
			assert.NoError(t, next.Release(ctxT(t, 10*time.Second)))
			if info, err := operator.ForceRelease(ctxT(t, 10*time.Second), key); err != nil || info.Held {
				t.Errorf("ForceRelease of a free key = %+v, %v", info, err)
			}
		})
	}
}

// TestForceReleaseCASGuard: the item changes between ForceRelease's read
// and its delete — a nested hold added, then another owner in place of the
// first; the delete compares the CAS value, fails, and the item is read
// again, so the report is of the record actually deleted.
func TestForceReleaseCASGuard(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	for _, m := range releaseModes {
		t.Run(m.name, func(t *testing.T) {
			holder, op := openDriver(t, mcURL(srv, m.query)), openDriver(t, mcURL(srv, m.query))
			key := "force-cas-" + m.name
			const ttl = time.Minute
			first, err := holder.TryAcquire(ctxT(t, 10*time.Second), backend.Request{Key: key, Owner: "first", TTL: ttl, Metadata: "1st"})
			require.NoError(t, err)
			held := []backend.Lock{first}
			var second backend.Lock
			calls := 0
			op.forceHook = func() {
				calls++
				ctx := ctxT(t, 10*time.Second)
				switch calls {
				case 1:
					l, err := holder.TryAcquire(ctx, req(key, "first", ttl))
					if err != nil {
						t.Errorf("nest: %v", err)
						return
					}
					held = append(held, l)
				case 2:
					for _, l := range held {
						_ = l.Release(ctx)
					}
					second, err = holder.TryAcquire(ctx, backend.Request{Key: key, Owner: "second", TTL: ttl, Metadata: "2nd"})
					assert.NoError(t, err, "second owner")
				}
			}
			info, err := op.ForceRelease(ctxT(t, 10*time.Second), key, backend.Holder{})
			require.NoError(t, err)
			if second == nil {
				t.Fatal("the second owner's acquisition in the hook failed")
			}
			if calls != 3 || !info.Held || info.Owner != "second" || info.Metadata != "2nd" || info.Holds != 1 {
				t.Errorf("after %d reads ForceRelease = %+v, want 3 reads and the second owner", calls, info)
			}
			assert.ErrorIs(t, second.Release(ctxT(t, 10*time.Second)), backend.ErrNotHeld, "the evicted second owner's Release")
		})
	}
}

// TestAdminForeignValue: a value distlock did not write under the lock's
// key is an error for Inspect and ForceRelease, and is left alone.
func TestAdminForeignValue(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	admin := adminClient(t, srv.Addr())
	for _, m := range releaseModes {
		d := openDriver(t, mcURL(srv, m.query))
		key := "foreign-" + m.name
		mk := ItemKey(DefaultPrefix, key)
		require.NoError(t, admin.Set(&memcache.Item{Key: mk, Value: []byte("not a lock")}))
		if _, err := d.Inspect(ctxT(t, 10*time.Second), key); !errors.Is(err, errForeign) {
			t.Errorf("%s: Inspect of a foreign value: %v", m.name, err)
		}
		if _, err := d.ForceRelease(ctxT(t, 10*time.Second), key, backend.Holder{}); !errors.Is(err, errForeign) {
			t.Errorf("%s: ForceRelease of a foreign value: %v", m.name, err)
		}
		if it, err := admin.Get(mk); err != nil || string(it.Value) != "not a lock" {
			t.Errorf("%s: the foreign value after ForceRelease: %v", m.name, err)
		}
	}
}

func TestParseMGHeader(t *testing.T) {
	mi, err := parseMGHeader([]byte("VA 3 t10 c42"))
	if err != nil || mi.ttl != 10 || mi.cas != 42 || len(mi.data) != 3 {
		t.Errorf("VA 3 t10 c42: %+v, %v", mi, err)
	}
	if mi, err := parseMGHeader([]byte("VA 0 c7 t-1")); err != nil || mi.ttl != -1 || mi.cas != 7 {
		t.Errorf("VA 0 c7 t-1: %+v, %v", mi, err)
	}
	for _, bad := range []string{"VA", "VA x t1 c1", "VA 3 t1", "VA 3 c1", "VA 3 t c1", "VA -1 t1 c1", "VA 3 tx c1", "VA 99999999 t1 c1"} {
		if _, err := parseMGHeader([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
