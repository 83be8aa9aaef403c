package redlock

import (
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestRetryAfterFailedAttemptFindsNoOwnHold: a failed attempt whose
// request to one node was still on its way at the decision grants that
// node late (the lock was freed there meanwhile), and undoes it when the
// answer comes. The same Locker's next attempt must not find that hold:
// it waits, on that node, for the late answer and its undo. Here the lock
// is free on nodes 0–2 and still held on 3–4 (the holder's release is on
// its way there), so the next attempt needs node 0; without the wait its
// request lands there behind the late grant, before the undo, and the
// attempt fails with 3 of 5 nodes busy on a lock nobody holds.
func TestRetryAfterFailedAttemptFindsNoOwnHold(t *testing.T) {
	c := startCluster(t, 5)
	addrs := c.addrs()
	pb, err := netfault.ListenGroup(addrs[0]) // b's link to node 0
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pb.Close() })
	pa, err := netfault.ListenGroup(addrs[3:]...) // a's links to nodes 3 and 4
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pa.Close() })
	timeout := WithNodeTimeout(slack.D(5 * time.Second))
	a := newTestLocker(t, append(addrs[:3:3], pa.Addrs()...), timeout)
	b := newTestLocker(t, append(pb.Addrs(), addrs[1:]...), timeout)
	for _, l := range []*testLocker{a, b} {
		for _, nd := range driverOf(l).nodes {
			if err := nd.client.(*goredis.Client).Ping(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	const key = "ghost/own"
	ctx := tctx(t, slack.D(30*time.Second))
	la, err := a.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, slack.D(5*time.Second), "a's hold on every node", func() bool { return len(c.holders(t, prefix, key)) == 5 })

	const delay = 300 * time.Millisecond
	pb.DelayRequests(delay) // b's request to node 0 lands after a released it
	pa.DelayRequests(slack.D(3 * time.Second))
	if _, err := b.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while a holds every node: %v, want ErrNotAcquired", err)
	}
	// b's request to node 0 is still on its way: b's next attempts wait
	// there for its answer.
	if driverOf(b).releasing.of(redislua.KeysFor(prefix, key).Lock) == nil {
		t.Fatal("the failed attempt's node 0 is not tracked for the next attempt")
	}
	if err := la.Release(ctx); err != nil { // decided by nodes 0–2; 3–4 follow
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire with nodes 0–2 free: %v; nodes' owners now %q", err, c.owners(t, prefix, key))
	}
	pb.Heal()
	pa.Heal()
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
