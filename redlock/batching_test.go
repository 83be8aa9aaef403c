package redlock

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestConcurrentRequestsBatchedPerNode: 32 goroutines of one Locker
// acquiring and releasing distinct keys share round trips on every node
// (fewer round trips than requests per node), and every lock is released.
func TestConcurrentRequestsBatchedPerNode(t *testing.T) {
	c := startCluster(t, 3)
	l := newTestLocker(t, c.addrs(), WithNodeTimeout(5*time.Second))
	ctx := tctx(t, time.Minute)
	for _, admin := range c.admins { // the first request to each node waits in flight while the others queue
		if err := admin.Do(ctx, "CLIENT", "PAUSE", 300, "ALL").Err(); err != nil {
			t.Fatal(err)
		}
	}
	const workers, rounds = 32, 10
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				lease, err := l.TryAcquire(ctx, fmt.Sprintf("batched/%d/%d", w, i))
				if err != nil {
					t.Error(err)
					return
				}
				if err := lease.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i, nd := range driverOf(l).nodes {
		rt, reqs := nd.batch.Stats()
		t.Logf("node %d: %d requests in %d round trips", i, reqs, rt)
		if rt >= reqs {
			t.Errorf("node %d: %d round trips for %d requests: no batching", i, rt, reqs)
		}
	}
	for i, admin := range c.admins {
		eventually(t, 10*time.Second, fmt.Sprintf("node %d free of locks", i), func() bool {
			return len(admin.Keys(ctx, prefix+"{*").Val()) == 0
		})
	}
}
