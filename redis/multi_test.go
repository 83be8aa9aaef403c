package redis

import (
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// TestAcquireAllInOneScript: uncontended, AcquireAll of four keys sends one
// script; with a key held it takes none in that script, then waits for the
// held key on the one-by-one path, and gets it once it is released.
func TestAcquireAllInOneScript(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	scripts := newScriptCounter()
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	l.client.AddHook(scripts)
	other := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, 30*time.Second)
	keys := []string{"m/d", "m/a", "m/c", "m/b"}
	warm, err := l.AcquireAll(ctx, []string{"w/1", "w/2"}) // loads the script (EVALSHA, NOSCRIPT, EVAL)
	require.NoError(t, err)
	_ = warm.Release(ctx)
	scripts.n.Store(0)
	m, err := l.AcquireAll(ctx, keys, distlock.WithTTL(10*time.Second))
	require.NoError(t, err)
	if n := scripts.n.Load(); n != 1 {
		t.Errorf("AcquireAll of 4 free keys sent %d scripts, want 1", n)
	}
	var last uint64
	for _, ls := range m.Leases() {
		if ls.Token() == 0 || ls.Deadline().IsZero() {
			t.Errorf("member %q: token %d, deadline %v", ls.Key(), ls.Token(), ls.Deadline())
		}
		last = max(last, ls.Token())
	}
	for _, k := range keys {
		if _, err := other.TryAcquire(ctx, k); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("%s not held by the MultiLease: %v", k, err)
		}
	}
	require.NoError(t, m.Release(ctx))
	held, err := other.TryAcquire(ctx, "m/c")
	require.NoError(t, err)
	if _, err := l.TryAcquireAll(ctx, keys); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquireAll with m/c held: %v", err)
	}
	for _, k := range []string{"m/a", "m/b", "m/d"} {
		ls, err := other.TryAcquire(ctx, k)
		require.NoError(t, err, "%s left behind by the failed TryAcquireAll", k)
		_ = ls.Release(ctx)
	}
	got := make(chan error, 1)
	go func() {
		m, err := l.AcquireAll(ctx, keys)
		if err == nil {
			for _, ls := range m.Leases() {
				if ls.Token() <= last {
					t.Errorf("token %d of %q not above %d", ls.Token(), ls.Key(), last)
				}
			}
			err = m.Release(ctx)
		}
		got <- err
	}()
	_ = held.Release(ctx)
	require.NoError(t, <-got, "AcquireAll waiting for m/c")
}
