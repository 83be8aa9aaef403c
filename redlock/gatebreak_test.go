package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestReentrantTryAcquireNotRefusedAtGate: owner O holds the lock on 4 of
// 5 nodes; the lock's gate node holds another owner's young hold (a
// contender's attempt under way there). A Locker with waiters queued on
// the lock (so its attempts are gated) makes a TryAcquire with WithOwner(O):
// a nested acquisition succeeds at once (4 nodes re-enter: a quorum), it
// is not refused by the gate's young hold.
func TestReentrantTryAcquireNotRefusedAtGate(t *testing.T) {
	// A long per-node timeout: the contender's hold on the gate stays
	// young for the whole test.
	c, a, b := twoLockers(t, WithNodeTimeout(slack.D(2*time.Second)))
	const key = "gatebreak/reentrant"
	ctx := tctx(t, slack.D(30*time.Second))
	outer, err := a.TryAcquire(ctx, key, distlock.WithOwner("O"), distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	d := driverOf(b)
	gate := d.gateOf(key)
	// O's hold on the gate is gone; a contender's young hold is there.
	if err := c.admins[gate].Del(ctx, redislua.KeysFor(prefix, key).Lock).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.nodes[gate].batch.Acquire(ctx, d.keys(key), "contender", redislua.NewHoldSource().Next(), "", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	wctx, stopWaiter := context.WithCancel(ctx)
	got := acquireAndRelease(wctx, b, key)
	eventually(t, slack.D(10*time.Second), "b's waiter queued", func() bool { return d.waiting.has(key) })
	nested, err := b.TryAcquire(ctx, key, distlock.WithOwner("O"), distlock.WithTTL(time.Minute))
	stopWaiter()
	if werr := <-got; !errors.Is(werr, context.Canceled) {
		t.Errorf("b's waiter: %v, want its ctx's end", werr)
	}
	if err != nil {
		t.Fatalf("nested TryAcquire of O, which holds 4 of 5 nodes: %v, want the lock at once", err)
	}
	if err := nested.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
