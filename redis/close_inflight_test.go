package redis

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/netfault"
)

// TestCloseWithRequestInFlightLeavesNoLock is TestDelayedRequestUndone
// with Close right after the timed-out TryAcquire (a service shutting down
// after the timeout): the acquire script lands after Close began, and the
// lock must still be given back within the bounded cleanup, not left for
// its 10-minute TTL. (Close's Quit cut UndoAcquire's schedule to one last
// try, which came before the script landed.)
func TestCloseWithRequestInFlightLeavesNoLock(t *testing.T) {
	srv, p := proxied(t)
	admin := adminClient(t, srv.Addr())
	l := newTestLocker(t, &goredis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	ctx := tctx(t, time.Minute)
	if lease, err := l.TryAcquire(ctx, "closeflight/warm"); err != nil {
		t.Fatal(err)
	} else if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.SetScope(netfault.OpenConns)
	p.SetLatencyDir(netfault.Request, 600*time.Millisecond)
	const key = "closeflight/acquire"
	k := redislua.KeysFor(redislua.DefaultPrefix, key)
	actx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	_, err := l.TryAcquire(actx, key, distlock.WithTTL(10*time.Minute))
	cancel()
	if err == nil {
		t.Fatal("TryAcquire with its request delayed past its ctx succeeded")
	}
	start := time.Now()
	_ = l.Close()
	t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
	eventually(t, 5*time.Second, "the delayed acquire ran on the server", func() bool {
		return admin.Get(ctx, k.Fence).Val() == "1"
	})
	eventually(t, 8*time.Second, "the late lock undone (bounded cleanup) although Close ran", func() bool {
		return admin.Exists(ctx, k.Lock).Val() == 0
	})
}
