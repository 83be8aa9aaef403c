package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// proxied starts a Redis server and a fault proxy in front of it.
func proxied(t *testing.T) (*testserver.Server, *netfault.Proxy) {
	t.Helper()
	srv := testserver.Redis(t, testserver.RedisConfig{})
	p, err := netfault.Listen(srv.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return srv, p
}

// TestDelayedRequestUndone: a TryAcquire whose request bytes are held up
// in the network past its ctx reaches Redis after the caller gave up, and
// after the first undo, which finds nothing: the undo retries on its
// schedule and removes the late lock, which would otherwise stay for its
// whole TTL.
func TestDelayedRequestUndone(t *testing.T) { delayedRequestUndone(t, false) }

// delayedRequestUndone is TestDelayedRequestUndone, and with closeAfter
// TestCloseWithRequestInFlightLeavesNoLock: the Locker is closed right
// after the timed-out TryAcquire.
func delayedRequestUndone(t *testing.T, closeAfter bool) {
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
	k := redislua.KeysFor(redislua.DefaultPrefix, key)
	actx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	_, err := l.TryAcquire(actx, key, distlock.WithTTL(10*time.Minute))
	cancel()
	require.Error(t, err, "TryAcquire with its request delayed past its ctx succeeded")
	if closeAfter {
		start := time.Now()
		_ = l.Close()
		t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
	}
	eventually(t, 5*time.Second, "the delayed acquire ran on the server", func() bool {
		return admin.Get(ctx, k.Fence).Val() == "1"
	})
	eventually(t, 8*time.Second, fmt.Sprintf("the late lock undone (bounded cleanup; Close ran: %v)", closeAfter), func() bool {
		return admin.Exists(ctx, k.Lock).Val() == 0
	})
}

// TestAcquireSilentSubscription: with the waiter's pub/sub connection
// silent (requests, or replies, held by the network: the SUBSCRIBE is never
// confirmed), Acquire still returns when its ctx ends, with ErrNotAcquired
// wrapping the ctx error. The second key's subscription is a new channel
// requested while the first one's write is still stuck.
func TestAcquireSilentSubscription(t *testing.T) {
	for _, tc := range []struct {
		name string
		dir  netfault.Direction
	}{{"request", netfault.Request}, {"reply", netfault.Reply}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, p := proxied(t)
			ctx := tctx(t, time.Minute)
			holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
			keys := []string{"silent/a", "silent/b"}
			for _, key := range keys {
				if _, err := holder.TryAcquire(ctx, key, distlock.WithTTL(time.Minute)); err != nil {
					t.Fatal(err)
				}
			}
			w := newTestLocker(t, &goredis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
			if err := w.client.Ping(ctx).Err(); err != nil { // the command connection, open before the fault
				t.Fatal(err)
			}
			p.SetScope(netfault.NewConns) // the pub/sub connection, dialled later
			p.BlackholeDir(tc.dir)
			for _, key := range keys {
				assertAcquireBounded(t, w.Locker, key, 200*time.Millisecond)
			}
		})
	}
}

// assertAcquireBounded checks that Acquire of a busy key with a ctx of d
// returns within d plus a slack for a loaded machine, with ErrNotAcquired
// wrapping the ctx error (not ErrUnavailable: the backend answered "busy").
func assertAcquireBounded(t *testing.T, l *distlock.Locker, key string, d time.Duration) {
	t.Helper()
	const slack = 300 * time.Millisecond
	actx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	start := time.Now()
	_, err := l.Acquire(actx, key)
	took := time.Since(start)
	if took > d+slack {
		t.Errorf("Acquire %q with a %v ctx returned after %v", key, d, took)
	}
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("Acquire %q = %v, want ErrNotAcquired wrapping context.DeadlineExceeded, not ErrUnavailable", key, err)
	}
}
