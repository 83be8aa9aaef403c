package redlock

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestContendedLockerSettles: 64 goroutines of one Locker (two of its
// links slow, so that failed attempts' answers often come late and are
// tracked) and 16 of another contend for one key, a bounded number of
// rounds each. No two hold it at once; once all is over, neither Locker
// tracks anything, no hold is left on any node, and after Close no
// goroutine of theirs is left.
func TestContendedLockerSettles(t *testing.T) {
	c := startCluster(t, 5)
	g, err := netfault.ListenGroup(c.addrs()[:2]...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	before := runtime.NumGoroutine()
	timeout := WithNodeTimeout(slack.D(200 * time.Millisecond))
	l1 := newTestLocker(t, append(g.Addrs(), c.addrs()[2:]...), timeout)
	l2 := newTestLocker(t, c.addrs(), timeout)
	warm(t, l1)
	warm(t, l2)
	g.SetLatency(2 * time.Millisecond)

	const key, rounds = "contend/one", 4
	var inside, maxInside, held, gaveUp atomic.Int64
	var wg sync.WaitGroup
	work := func(l *testLocker) {
		defer wg.Done()
		for range rounds {
			ctx, cancel := context.WithTimeout(context.Background(), slack.D(20*time.Second))
			lease, err := l.Acquire(ctx, key, distlock.WithTTL(5*time.Second))
			if err != nil {
				cancel()
				if gaveUp.Add(1) <= 3 {
					t.Logf("acquire: %v", err)
				}
				continue
			}
			n := inside.Add(1)
			for m := maxInside.Load(); n > m && !maxInside.CompareAndSwap(m, n); m = maxInside.Load() {
			}
			time.Sleep(100 * time.Microsecond)
			inside.Add(-1)
			held.Add(1)
			cancel() // the wait's ctx may be nearly spent: the release has its own
			rctx, rcancel := context.WithTimeout(context.Background(), slack.D(10*time.Second))
			if err := lease.Release(rctx); err != nil {
				t.Errorf("release: %v", err)
			}
			rcancel()
		}
	}
	start := time.Now()
	for range 64 {
		wg.Add(1)
		go work(l1)
	}
	for range 16 {
		wg.Add(1)
		go work(l2)
	}
	wg.Wait()
	t.Logf("%d held, %d gave up, in %v", held.Load(), gaveUp.Load(), time.Since(start))
	if m := maxInside.Load(); m > 1 {
		t.Fatalf("%d holders at once", m)
	}
	g.SetLatency(0)
	eventually(t, slack.D(20*time.Second), "no tracking left", func() bool {
		return driverOf(l1).releasing.n.Load() == 0 && driverOf(l2).releasing.n.Load() == 0
	})
	eventually(t, slack.D(20*time.Second), "no hold left", func() bool {
		keys, err := c.scanLocks(t.Context(), prefix)
		return err == nil && len(keys) == 0
	})
	closed := make(chan struct{})
	go func() {
		_ = l1.Close()
		_ = l2.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(slack.D(10 * time.Second)):
		t.Fatal("Close did not return")
	}
	var now int
	eventually(t, slack.D(10*time.Second), "the Lockers' goroutines to end", func() bool {
		now = runtime.NumGoroutine()
		return now <= before
	})
}
