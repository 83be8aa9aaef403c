package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/netfault"
)

// TestAcquireSilentSubscription: with the waiter's pub/sub connections to
// every node silent (requests, or replies, held by the network: no
// SUBSCRIBE is ever confirmed), Acquire still returns when its ctx ends,
// with ErrNotAcquired wrapping the ctx error.
func TestAcquireSilentSubscription(t *testing.T) {
	c := startCluster(t, 5)
	ctx := tctx(t, time.Minute)
	holder := newTestLocker(t, c.addrs())
	keys := []string{"silent/a", "silent/b"}
	for _, key := range keys {
		if _, err := holder.TryAcquire(ctx, key, distlock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		dir  netfault.Direction
	}{{"request", netfault.Request}, {"reply", netfault.Reply}} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := netfault.ListenGroup(c.addrs()...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = g.Close() })
			w := newTestLocker(t, g.Addrs(), WithNodeTimeout(time.Second))
			for _, nd := range w.d.nodes { // the command connections, open before the fault
				if err := nd.client.(*goredis.Client).Ping(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			g.SetScope(netfault.NewConns) // the pub/sub connections, dialled later
			g.BlackholeDir(tc.dir)
			for _, key := range keys {
				assertAcquireBounded(t, w, key, 200*time.Millisecond)
			}
		})
	}
}

// assertAcquireBounded checks that Acquire of a busy key with a ctx of d
// returns within d plus a slack for a loaded machine, with ErrNotAcquired
// wrapping the ctx error (not ErrUnavailable: the nodes answered "busy").
func assertAcquireBounded(t *testing.T, l distlock.Locker, key string, d time.Duration) {
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
