package redlock

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/testkit/netfault"
)

// TestOwnReleaseWaitBounded: a release decided by a quorum while one node
// never answers (its link blackholed) is tracked; the same Locker's next
// acquisitions of the key wait on that node for the release's answer, but
// no longer than the per-node timeout: one that needs that node (the
// third is held by another owner) fails within its ctx, and the tracking
// ends when the node's call gives up.
func TestOwnReleaseWaitBounded(t *testing.T) {
	c := startCluster(t, 3)
	g, err := netfault.ListenGroup(c.addrs()[2])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	l := newTestLocker(t, append(c.addrs()[:2:2], g.Addrs()...), WithNodeTimeout(300*time.Millisecond))
	for _, nd := range driverOf(l).nodes {
		if err := nd.client.(*goredis.Client).Ping(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const key = "own-release/partitioned"
	lease, err := l.TryAcquire(tctx(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	g.Blackhole()
	if err := lease.Release(tctx(t, 10*time.Second)); err != nil {
		t.Fatalf("release with one node of three blackholed: %v", err)
	}
	// Node 0 now held by another owner: an acquisition needs node 2,
	// where it waits for the release that never answers, then sends its
	// own request there, which is lost too.
	holdMinorities(t, c, key, time.Minute, 0)
	for i := range 3 {
		ctx := tctx(t, 30*time.Second)
		_, err := l.TryAcquire(ctx, key)
		if err == nil || ctx.Err() != nil {
			t.Fatalf("acquisition %d needing the node that never answered its release: %v (ctx: %v), want a failure within the per-node timeout", i, err, ctx.Err())
		}
		t.Logf("acquisition %d: %v", i, err)
	}
	g.Heal()
	eventually(t, 30*time.Second, "the release tracking to end", func() bool { return driverOf(l).releasing.n.Load() == 0 })
}
