package redlock

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// evalshas is the number of scripts the nodes ran so far (INFO
// commandstats), over all nodes.
func (c *cluster) evalshas(t testing.TB) int64 {
	t.Helper()
	var n int64
	for _, a := range c.admins {
		info, err := a.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls=")
			if !ok {
				continue
			}
			v, _, _ = strings.Cut(v, ",")
			k, _ := strconv.ParseInt(v, 10, 64)
			n += k
		}
	}
	return n
}

// countAttempts counts l's acquire attempts (at their decision).
func countAttempts(l *testLocker) *atomic.Int64 {
	var n atomic.Int64
	driverOf(l).onAttempt = func(tally) { n.Add(1) }
	return &n
}

// TestWokenWaiterAsksTheGateFirst: a waiter woken while the lock is held
// by a young hold asks the lock's gate node alone — one script on one node,
// not one on every node — so that the waiters of several Lockers woken by
// one release are served one at a time at the gate instead of splitting
// the nodes among them (split votes, after which all give back and retry).
func TestWokenWaiterAsksTheGateFirst(t *testing.T) {
	// A long per-node timeout: the holder's hold stays "young" (younger
	// than two per-node timeouts) for the whole test.
	opts := []Option{WithNodeTimeout(slack.D(time.Second))}
	c, a, b := twoLockers(t, opts...)
	const key = "gate/woken"
	ctx := tctx(t, slack.D(30*time.Second))
	held, err := a.Acquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	attempts := countAttempts(b)
	got := acquireAndRelease(ctx, b, key)
	// The first attempt, then the one after subscribing.
	eventually(t, slack.D(10*time.Second), "the waiter's first two attempts", func() bool { return attempts.Load() >= 2 })
	before, n := c.evalshas(t), attempts.Load()
	// A wake-up on one node, as a release's message would be.
	if err := c.admins[0].Publish(ctx, driverOf(b).keys(key).Channel, "x").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, slack.D(10*time.Second), "the woken waiter's attempt", func() bool { return attempts.Load() > n })
	if d := c.evalshas(t) - before; d != 1 {
		t.Fatalf("the woken waiter's attempt ran %d scripts over the nodes, want 1 (at the gate)", d)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter after the release: %v", err)
	}
}

// TestLeftoverOnTheGateDoesNotBlockWaiters: a hold of another owner left on
// the gate node alone (a failed attempt's give-back that never arrived),
// older than an attempt under way can be, does not hold up waiters while
// the other nodes are free: their attempt goes on to every node.
func TestLeftoverOnTheGateDoesNotBlockWaiters(t *testing.T) {
	_, a, b := twoLockers(t)
	const key = "gate/leftover"
	ctx := tctx(t, slack.D(30*time.Second))
	d := driverOf(b)
	gate := d.gateOf(key)
	if _, _, err := d.nodes[gate].batch.Acquire(ctx, d.keys(key), "someone-else", redislua.NewHoldSource().Next(), "", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	held, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAndRelease(ctx, b, key)
	eventually(t, slack.D(10*time.Second), "the waiter queued", func() bool { return d.waiting.has(key) })
	// The leftover grows older than an attempt under way can be.
	time.Sleep(d.youngHold())
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter: %v", err)
		}
	case <-time.After(slack.D(5 * time.Second)):
		t.Fatal("the waiter is still waiting, 5s after the release, with a quorum of nodes free")
	}
}

// twoLockers starts 5 nodes and two warm Lockers over them.
func twoLockers(t *testing.T, opts ...Option) (*cluster, *testLocker, *testLocker) {
	t.Helper()
	c := startCluster(t, 5)
	a, b := newTestLocker(t, c.addrs(), opts...), newTestLocker(t, c.addrs(), opts...)
	warm(t, a)
	warm(t, b)
	return c, a, b
}

// acquireAndRelease acquires key with l and releases it, in the
// background; the channel gets the first error, or nil.
func acquireAndRelease(ctx context.Context, l *testLocker, key string) <-chan error {
	got := make(chan error, 1)
	go func() {
		lease, err := l.Acquire(ctx, key)
		if err == nil {
			err = lease.Release(ctx)
		}
		got <- err
	}()
	return got
}
