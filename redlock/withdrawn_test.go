package redlock

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestWithdrawnNodeIsNotMarkedDown: a node whose request an attempt never
// sent — it waited there for this driver's earlier operation on the lock,
// and the attempt failed meanwhile — did not fail: it is not marked down
// (which would keep the waiters' attempts away from the lock's gate node,
// and Watch from waiting for its subscription, for a second).
func TestWithdrawnNodeIsNotMarkedDown(t *testing.T) {
	_, a, b := twoLockers(t)
	const key = "withdrawn/one"
	ctx := tctx(t, slack.D(30*time.Second))
	held, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(ctx) }()
	d := driverOf(b)
	// An earlier operation of b's still running on node 0 alone.
	p := newPendingNodes([]bool{false, true, true, true, true})
	d.releasing.track(d.keys(key).Lock, p)
	if _, err := b.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock: %v, want busy", err)
	}
	p.done(0) // node 0's request is withdrawn now, unsent
	eventually(t, slack.D(10*time.Second), "the attempt's node 0 settled", func() bool {
		return d.releasing.n.Load() == 0
	})
	if d.nodes[0].down(d) {
		t.Fatal("node 0 is marked down, though the attempt never sent it a request")
	}
}
