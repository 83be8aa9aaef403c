package redlock

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestInspectQuorum: over five nodes, Inspect reports the holder a quorum
// agrees on (its metadata, the holds on a quorum, the smallest PTTL among
// them), not held when no owner can reach a quorum, ErrUnavailable when
// the missing nodes could decide it; ForceRelease needs a quorum of nodes
// cleared and reports what it evicted.
func TestInspectQuorum(t *testing.T) {
	c := startCluster(t, 5)
	c.controllable(t)
	l := newTestLocker(t, c.addrs(), WithNodeTimeout(slack.D(500*time.Millisecond)))
	ctx := tctx(t, time.Minute)
	const key = "admin/quorum"
	k := redislua.KeysFor(prefix, key)
	opts := []distlock.Option{distlock.WithOwner("A"), distlock.WithTTL(time.Minute), distlock.WithAutoRefresh(false)}
	first, err := l.TryAcquire(ctx, key, append(opts, distlock.WithMetadata("job=1"))...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, key, append(opts, distlock.WithMetadata("nested"))...); err != nil {
		t.Fatal(err)
	}
	inspect := func() (distlock.LockInfo, error) { return l.Inspect(ctx, key) }
	if info, err := inspect(); err != nil || !info.Held || info.Owner != "A" || info.Metadata != "job=1" || info.Holds != 2 || info.Token != 0 || info.Waiters != -1 || info.TTL <= 50*time.Second {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	// Nodes 3 and 4 show another owner; node 1 has less time left, and
	// nodes 0 and 1 lost the nested hold: A still holds a quorum (0, 1,
	// 2), with one hold on a quorum, and the smallest PTTL of the three.
	for _, i := range []int{3, 4} {
		c.admins[i].Del(ctx, k.Lock)
		c.admins[i].HSet(ctx, k.Lock, "o", "X", "t", 0, "hX", 1)
	}
	c.admins[1].PExpire(ctx, k.Lock, 30*time.Second)
	holds, _ := c.admins[2].HKeys(ctx, k.Lock).Result()
	for _, h := range holds {
		if h[0] == 'h' {
			if c.admins[0].HDel(ctx, k.Lock, h).Val() == 1 {
				c.admins[1].HDel(ctx, k.Lock, h)
				break
			}
		}
	}
	if info, err := inspect(); err != nil || info.Owner != "A" || info.Holds != 1 || info.TTL > 30*time.Second || info.TTL <= 0 {
		t.Errorf("Inspect with a minority of another owner = %+v, %v; want A, 1 hold, TTL <= 30s", info, err)
	}
	// Node 2 free: A on 2, X on 2, no one can have a quorum.
	c.admins[2].Del(ctx, k.Lock)
	if info, err := inspect(); err != nil || info.Held {
		t.Errorf("Inspect of a split lock = %+v, %v; want not held", info, err)
	}
	// Node 2 back for A; nodes 3 and 4 down: A's quorum answers.
	c.admins[2].HSet(ctx, k.Lock, "o", "A", "t", 0, "hA", 1)
	c.admins[2].PExpire(ctx, k.Lock, time.Minute)
	c.kill(t, 3, 4)
	if info, err := inspect(); err != nil || info.Owner != "A" {
		t.Errorf("Inspect with two nodes down = %+v, %v; want A", info, err)
	}
	// Node 2 down too: A on the 2 that answer; the 3 missing could
	// decide either way.
	c.kill(t, 2)
	if info, err := inspect(); !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("Inspect with 3 of 5 nodes down = %+v, %v; want ErrUnavailable", info, err)
	}
	if info, err := l.ForceRelease(ctx, key); !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("ForceRelease with 3 of 5 nodes down = %+v, %v; want ErrUnavailable", info, err)
	}
	// Node 2 restarted (empty): three nodes clear it, a quorum.
	c.restart(t, 2)
	if info, err := l.ForceRelease(ctx, key); err != nil {
		t.Errorf("ForceRelease with a quorum up = %+v, %v", info, err)
	}
	if info, err := inspect(); err != nil || info.Held {
		t.Errorf("Inspect after ForceRelease = %+v, %v; want not held", info, err)
	}
	if err := first.Refresh(ctx, time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("the evicted holder's Refresh: %v, want ErrNotHeld", err)
	}
}

// TestForceReleaseWakes: a waiter blocked on a lock held for a minute
// gets it after a ForceRelease, through the release notification (its ctx
// ends long before the holder's TTL would).
func TestForceReleaseWakes(t *testing.T) {
	c := startCluster(t, 3)
	// A generous node timeout: this test is about the wake-up, and under a
	// loaded -race run the default 50ms failed the holder's TryAcquire on
	// every node.
	nt := WithNodeTimeout(slack.D(time.Second))
	holder, waiter, operator := newTestLocker(t, c.addrs(), nt), newTestLocker(t, c.addrs(), nt), newTestLocker(t, c.addrs(), nt)
	ctx := tctx(t, time.Minute)
	const key = "admin/wake"
	if _, err := holder.TryAcquire(ctx, key, distlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		wctx := tctx(t, 20*time.Second)
		lease, err := waiter.Acquire(wctx, key)
		if err == nil {
			err = lease.Release(ctx)
		}
		got <- err
	}()
	eventually(t, 10*time.Second, "waiter subscribed", func() bool {
		n, _ := c.admins[0].PubSubNumSub(ctx, redislua.KeysFor(prefix, key).Channel).Result()
		return n[redislua.KeysFor(prefix, key).Channel] > 0
	})
	if info, err := operator.ForceRelease(ctx, key); err != nil || !info.Held {
		t.Fatalf("ForceRelease = %+v, %v", info, err)
	}
	if err := <-got; err != nil {
		t.Errorf("waiter after ForceRelease: %v", err)
	}
}
