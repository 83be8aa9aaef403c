package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestAcquireSilentSubscription: with the waiter's pub/sub connections to
// every node silent (requests, or replies, held by the network: no
// SUBSCRIBE is ever confirmed), Acquire still returns when its ctx ends,
// with ErrNotAcquired wrapping the ctx error.
func TestAcquireSilentSubscription(t *testing.T) {
	conformance.Parallel(t)
	c := startCluster(t, 5)
	ctx := tctx(t, time.Minute)
	// The holder with a generous node timeout: its cold first acquisition
	// dials and loads the scripts, which under a loaded -race run can take
	// more than 50ms on every node.
	holder := newTestLocker(t, c.addrs(), WithNodeTimeout(time.Second))
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
			for _, nd := range driverOf(w).nodes { // the command connections, open before the fault
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

// holdMinorities makes owner dead-i hold key on node i for each i in
// nodes, as contenders that died in a split vote leave it until their TTL.
func holdMinorities(t *testing.T, c *cluster, key string, ttl time.Duration, nodes ...int) {
	t.Helper()
	k := redislua.KeysFor(prefix, key)
	k.Fence, k.Legacy = "", ""
	hs := redislua.NewHoldSource()
	for _, i := range nodes {
		r, err := redislua.Acquire(t.Context(), c.admins[i], k, fmt.Sprintf("dead-%d", i), hs.Next(), "", ttl)
		if err != nil || r.Outcome != redislua.Acquired {
			t.Fatalf("node %d: %+v, %v", i, r, err)
		}
	}
}

// TestNoQuorumPossible: 3 of 5 nodes each held by a different owner, so no
// attempt can reach a quorum until one of them expires. A waiter with a 1s
// ctx makes a handful of attempts (not one per round trip: a give-back that
// frees nothing usable must not wake it), and ends with ErrNotAcquired —
// every node answered — never ErrUnavailable, in each of 10 runs.
func TestNoQuorumPossible(t *testing.T) {
	c := startCluster(t, 5)
	const runs, maxAttempts = 10, 20
	type result struct {
		attempts int64
		err      error
	}
	results := make(chan result, runs)
	for i := range runs {
		key := fmt.Sprintf("no-quorum/%d", i)
		holdMinorities(t, c, key, 30*time.Second, 0, 1, 2)
		// Busy answers are quick; a loaded -race run may not be. (With
		// 200ms, the waits for the young holds to be given back end
		// about 410ms in, away from the end of the ctx: a ctx that ends
		// while an attempt has no answer yet is "no answer", see the
		// root package's noAnswer.)
		// Both grow with DISTLOCK_TEST_SLACK, together.
		w := newTestLocker(t, c.addrs(), WithNodeTimeout(slack.D(200*time.Millisecond)))
		for _, nd := range driverOf(w).nodes {
			if err := nd.client.(*goredis.Client).Ping(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		counter := &acquireCounter{}
		driverOf(w).nodes[4].client.(*goredis.Client).AddHook(counter) // every attempt goes to every node
		go func() {
			ctx, cancel := context.WithTimeout(t.Context(), slack.D(time.Second))
			defer cancel()
			_, err := w.Acquire(ctx, key)
			results <- result{counter.n.Load(), err}
		}()
	}
	var counts []int64
	for range runs {
		r := <-results
		counts = append(counts, r.attempts)
		if r.attempts > maxAttempts {
			t.Errorf("%d attempts in 1s with no quorum possible, want at most %d", r.attempts, maxAttempts)
		}
		if !errors.Is(r.err, distlock.ErrNotAcquired) || errors.Is(r.err, distlock.ErrUnavailable) {
			t.Errorf("Acquire = %v, want ErrNotAcquired, not ErrUnavailable (every node answered busy)", r.err)
		}
	}
	t.Logf("attempts per 1s wait: %v", counts)
}

// TestCtxEndsDuringBusyAttempt: the ctx ends while an attempt waits for
// slow nodes after the others answered "busy": the lock was found held,
// so the attempt fails with ErrNotAcquired wrapping the ctx error, not
// with ErrUnavailable.
func TestCtxEndsDuringBusyAttempt(t *testing.T) {
	c := startCluster(t, 5)
	const key = "busy/slow"
	holdMinorities(t, c, key, 30*time.Second, 0, 1)
	g, err := netfault.ListenGroup(c.addrs()[2:]...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	w := newTestLocker(t, append(c.addrs()[:2:2], g.Addrs()...), WithNodeTimeout(5*time.Second))
	for _, nd := range driverOf(w).nodes {
		if err := nd.client.(*goredis.Client).Ping(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	g.SetLatencyDir(netfault.Reply, 2*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = w.TryAcquire(ctx, key)
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("TryAcquire = %v, want ErrNotAcquired wrapping context.DeadlineExceeded, not ErrUnavailable", err)
	}
}
