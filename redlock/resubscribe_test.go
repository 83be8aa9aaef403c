package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/redissub/redialgate"
)

var acquireSHA, _, _ = redislua.ScriptHashes()

// TestReleaseDuringResubscription: the waiter's pub/sub connection to
// every node is killed (CLIENT KILL TYPE pubsub), each node's first redial
// fails and the second is held; the breaks' wake-ups find the lock still
// held, and the holder releases while the resubscriptions are pending —
// publishing to no one. Once they are confirmed the waiter must attempt
// again and acquire, not sleep for the rest of the holder's minute-long
// TTL (its ctx ends after 20s).
func TestReleaseDuringResubscription(t *testing.T) {
	c := startCluster(t, 3)
	holder := newTestLocker(t, c.addrs(), WithNodeTimeout(time.Second))
	gates := make([]*redialgate.Gate, len(c.srvs))
	clients := make([]goredis.UniversalClient, len(c.srvs))
	for i, s := range c.srvs {
		gates[i] = redialgate.New()
		t.Cleanup(gates[i].Open)
		clients[i] = goredis.NewClient(&goredis.Options{Addr: s.Addr(), Dialer: gates[i].Dial, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: 1})
	}
	waiter, err := New(clients, WithCloseClients(), WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiter.Close() })
	attempts := &landedAttempts{}
	for _, c := range clients {
		c.(*goredis.Client).AddHook(attempts)
	}
	wakes := func() (n int64) {
		for _, nd := range driverOf(waiter).nodes {
			n += nd.sub.Stats().Wakes
		}
		return n
	}
	ctx := tctx(t, 2*time.Minute)
	long := distlock.WithTTL(time.Minute)
	const key = "lostwake/resubscribe"
	channel := driverOf(waiter).keys(key).Channel
	h, err := holder.TryAcquire(ctx, key, long)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		w, err := waiter.Acquire(wctx, key, distlock.WithRetry(distlock.Backoff{Min: time.Minute, Max: time.Minute}), long)
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	eventually(t, 10*time.Second, "the waiter attempts, subscribes on every node (as the servers see it) and attempts again", func() bool {
		for i, nd := range driverOf(waiter).nodes {
			if !nd.sub.Watching(channel) {
				return false
			}
			if n := c.admins[i].PubSubNumSub(ctx, channel).Val()[channel]; n < 1 {
				return false
			}
		}
		return attempts.n.Load() >= 2
	})

	before, woken := attempts.n.Load(), wakes()
	for i, g := range gates {
		g.Arm()
		if n := c.admins[i].ClientKillByFilter(ctx, "TYPE", "pubsub").Val(); n != 1 {
			t.Fatalf("node %d: killed %d pub/sub clients, want 1", i, n)
		}
		select {
		case <-g.Held(): // the first redial failed, the second waits
		case <-time.After(10 * time.Second):
			t.Fatalf("node %d: no second redial", i)
		}
	}
	// Each wake-up the breaks delivered makes one attempt; once they have
	// landed the waiter sleeps on the holder's TTL.
	breaks := wakes() - woken
	if breaks == 0 {
		t.Fatal("the breaks woke no one")
	}
	eventually(t, 10*time.Second, "the breaks' wake-ups are attempted", func() bool { return attempts.n.Load() >= before+breaks })
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, g := range gates {
		g.Open()
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter not woken after the resubscriptions: the release made while they were pending is lost: %v", err)
	}
}

// landedAttempts counts the attempts of which an acquire script's reply
// came from some node, sent alone or in a pipeline: distinct hold ids, as
// an attempt that fails is not sent to the nodes that had not been sent
// it yet at its decision.
type landedAttempts struct {
	mu    sync.Mutex
	holds map[string]bool
	n     atomic.Int64
}

func (c *landedAttempts) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (c *landedAttempts) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		defer c.count(cmd)
		return next(ctx, cmd)
	}
}
func (c *landedAttempts) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		defer func() {
			for _, cmd := range cmds {
				c.count(cmd)
			}
		}()
		return next(ctx, cmds)
	}
}

// count records cmd's hold id if it is an acquire script: evalsha, sha,
// numkeys, the keys, then owner, ttl, hold id (acquire.lua's ARGV).
func (c *landedAttempts) count(cmd goredis.Cmder) {
	args := cmd.Args()
	if cmd.Name() != "evalsha" || len(args) < 3 || args[1] != acquireSHA {
		return
	}
	numKeys, ok := args[2].(int)
	if i := 3 + numKeys + 2; ok && i < len(args) {
		hold := fmt.Sprint(args[i])
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.holds == nil {
			c.holds = map[string]bool{}
		}
		if !c.holds[hold] {
			c.holds[hold] = true
			c.n.Add(1)
		}
	}
}
