package redlock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestOwnReleaseNotOvertaken: Release returns once a quorum released, and
// the other nodes' releases finish in the background; the same Locker's
// next acquire of the key must not overtake them. Uncontended cycles of one
// Locker get no busy answer from any node: each acquire is granted on all
// five (before, up to a third of one node's answers were busy).
func TestOwnReleaseNotOvertaken(t *testing.T) {
	c := startCluster(t, 5)
	// A generous node timeout: this test is about ordering, and under a
	// loaded -race run the default 50ms failed an acquire on every node.
	l := newTestLocker(t, c.addrs(), WithNodeTimeout(slack.D(time.Second)))
	busy := &busyCounter{}
	for _, n := range driverOf(l).nodes {
		n.client.(*goredis.Client).AddHook(busy)
	}
	ctx := tctx(t, time.Minute)
	const cycles = 300
	for i := range cycles {
		lease, err := l.TryAcquire(ctx, "own-release")
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("cycle %d: release: %v", i, err)
		}
	}
	if n := busy.n.Load(); n != 0 {
		t.Fatalf("%d busy answers to %d uncontended acquires on 5 nodes: an acquire overtook the previous release", n, 5*cycles)
	}
}

// busyCounter counts the acquire scripts that a client saw answer busy.
type busyCounter struct{ n atomic.Int64 }

func (c *busyCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (c *busyCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	sha, _, _ := redislua.ScriptHashes()
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); cmd.Name() == "evalsha" && len(args) > 1 && args[1] == sha {
			if x, ok := cmd.(*goredis.Cmd); ok {
				if v, _ := x.Slice(); len(v) > 0 && v[0] == int64(0) {
					c.n.Add(1)
				}
			}
		}
		return err
	}
}
func (c *busyCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}
