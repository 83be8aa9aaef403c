package redis

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// TestReleasePublishesOnlyForWaiters: a release that nobody waits for or
// watches sends no PUBLISH (issue #22); a waiter (registered by its busy
// attempt), a second waiter of the same Locker that the first wake-up did
// not wake (it is handed the wake-up when the first one leaves, and marks
// the first one's lock), and an Election observer are still woken by the
// release, long before the TTL-based fallback
// could (the holder's TTL is a minute, every wait is bounded at 30s).
func TestReleasePublishesOnlyForWaiters(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	waiters := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, 2*time.Minute)
	const key = "wake/mark"
	long := distlock.WithTTL(time.Minute)
	k := l.d.keys(key)

	before := commandCalls(t, admin, "publish")
	for range 20 {
		lease, err := l.TryAcquire(ctx, key, long)
		require.NoError(t, err)
		require.NoError(t, lease.Release(ctx))
	}
	if n := commandCalls(t, admin, "publish") - before; n != 0 {
		t.Fatalf("%d PUBLISH for 20 releases nobody waited for, want 0", n)
	}
	if n := admin.Exists(ctx, k.Lock).Val(); n != 0 {
		t.Fatalf("lock key left after unwatched releases")
	}

	// Two waiters of one Locker: the release wakes one; the other must be
	// woken by the release of the lock the first one takes.
	lease, err := l.TryAcquire(ctx, key, long)
	require.NoError(t, err)
	got := make(chan error, 2)
	for range 2 {
		go func() {
			wctx := tctx(t, 30*time.Second)
			w, err := waiters.Acquire(wctx, key, long)
			if err == nil {
				err = w.Release(ctx)
			}
			got <- err
		}()
	}
	eventually(t, 30*time.Second, "the waiters' busy attempts mark the lock", func() bool {
		return admin.HExists(ctx, k.Lock, "w").Val() && commandCalls(t, admin, "evalsha") > 0
	})
	time.Sleep(50 * time.Millisecond) // let the second waiter reach its wait too (it is woken either way)
	before = commandCalls(t, admin, "publish")
	require.NoError(t, lease.Release(ctx))
	for range 2 {
		require.NoError(t, <-got, "waiter not woken by the release (its TTL fallback is a minute away)")
	}
	if n := commandCalls(t, admin, "publish") - before; n < 1 {
		t.Fatalf("%d PUBLISH for releases with waiters", n)
	}

	// An observer: Observe subscribes (Watch) and looks (Inspect, which
	// marks the held lock), so the leader's resignation wakes it; its poll
	// interval and the term's TTL are a minute away.
	leader, err := distlock.NewElection(l.Locker, key, "leader", distlock.WithTermOptions(long))
	require.NoError(t, err)
	observer, err := distlock.NewElection(waiters.Locker, key, "observer", distlock.WithObserveInterval(time.Minute))
	require.NoError(t, err)
	term, err := leader.Campaign(ctx)
	require.NoError(t, err)
	octx := tctx(t, 30*time.Second)
	seen := observer.Observe(octx)
	if info := <-seen; !info.Held || info.Token != term.Token() {
		t.Fatalf("observer saw %+v first, want the leader's term %d", info, term.Token())
	}
	require.NoError(t, term.Resign(ctx))
	if info, ok := <-seen; !ok || info.Held {
		t.Fatalf("observer not told of the resignation before its poll interval (%+v, %v)", info, ok)
	}
}
