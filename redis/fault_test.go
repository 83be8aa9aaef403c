package redis

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/netfault"
	"github.com/distlock/distlock/internal/redisscript"
	"github.com/distlock/distlock/internal/testserver"
)

// proxied starts a Redis server and a fault proxy in front of it.
func proxied(t *testing.T) (*testserver.Server, *netfault.Proxy) {
	t.Helper()
	srv := testserver.Redis(t, testserver.RedisConfig{})
	p, err := netfault.Listen(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return srv, p
}

// TestDelayedRequestUndone: a TryAcquire whose request bytes are held up
// in the network past its ctx reaches Redis after the caller gave up, and
// after the first undo, which finds nothing: the undo retries on its
// schedule and removes the late lock, which would otherwise stay for its
// whole TTL.
func TestDelayedRequestUndone(t *testing.T) {
	srv, p := proxied(t)
	admin := adminClient(t, srv.Addr())
	// As the URL opener configures it: ctx deadlines bound the socket I/O.
	l := newTestLocker(t, &goredis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	ctx := tctx(t, time.Minute)
	// Load the scripts and leave one pooled connection open.
	if lease, err := l.TryAcquire(ctx, "delayed/warm"); err != nil {
		t.Fatal(err)
	} else if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Requests on that connection (the acquire's) take 600ms; the undo,
	// on a new connection, is not delayed and arrives first.
	p.SetScope(netfault.OpenConns)
	p.SetLatencyDir(netfault.Request, 600*time.Millisecond)
	const key = "delayed/acquire"
	k := redisscript.KeysFor(redisscript.DefaultPrefix, key)
	actx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	_, err := l.TryAcquire(actx, key, distlock.WithTTL(10*time.Minute))
	cancel()
	if err == nil {
		t.Fatal("TryAcquire with its request delayed past its ctx succeeded")
	}
	eventually(t, 5*time.Second, "the delayed acquire ran on the server", func() bool {
		return admin.Get(ctx, k.Fence).Val() == "1"
	})
	eventually(t, 8*time.Second, "the late lock undone (bounded cleanup)", func() bool {
		return admin.Exists(ctx, k.Lock).Val() == 0
	})
}
