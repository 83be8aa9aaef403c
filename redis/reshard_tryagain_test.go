package redis

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tryAgainCounter counts the TRYAGAIN replies a client received, and the
// MOVED and ASK redirections that reached it (after go-redis's own retries
// and redirects).
type tryAgainCounter struct{ n, redirects atomic.Int64 }

func (c *tryAgainCounter) note(err error) {
	if goredis.IsTryAgainError(err) {
		c.n.Add(1)
	}
	if redislua.IsRedirect(err) {
		c.redirects.Add(1)
	}
}

func (c *tryAgainCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *tryAgainCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		c.note(cmd.Err())
		return err
	}
}

func (c *tryAgainCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			c.note(cmd.Err())
		}
		return err
	}
}

// TestReshardTryAgainRetried splits a lock's slot between two masters by
// hand (MIGRATING/IMPORTING, the lock's hash moved, the slot's fencing
// counter not yet), where every acquisition gets TRYAGAIN, and checks that
// a plain TryAcquire and a plain Acquire (no WithRetryUnavailable) wait
// the split out: the TryAcquire started during the split reports the lock
// held once the slot has moved; the waiter woken by a release during the
// split takes the lock once it has moved back. A TryAcquire while the
// source has given the slot up but the target, still importing, sends
// every request back to the source (MOVED both ways, more redirects than
// go-redis follows) waits until the target has it. A split that outlasts the
// retry bound gives ErrUnavailable with the TRYAGAIN reply as its cause,
// and one the caller's ctx outlasts gives the ctx error.
func TestReshardTryAgainRetried(t *testing.T) {
	testserver.SkipShort(t, "redis cluster")
	conformance.Parallel(t)
	cluster := testserver.RedisClusterWith(t, testserver.ClusterConfig{Masters: 3})
	ctx := tctx(t, 2*time.Minute)
	url := "redis+cluster://" + strings.Join(cluster.Addrs(), ",") + "/?prefix=ta:"
	open := func() (*distlock.Locker, *tryAgainCounter) {
		l, err := distlock.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		var client goredis.UniversalClient
		if !l.As(&client) {
			t.Fatal("no client")
		}
		n := &tryAgainCounter{}
		client.AddHook(n)
		return l, n
	}
	a, _ := open()
	b, bTried := open()
	c, cTried := open()
	const key = "tryagain"
	keys := redislua.KeysFor("ta:", key)
	slot := redislua.Slot(keys.Lock)
	src, dst := slotMasters(t, ctx, cluster, keys.Lock)
	// The waiter's wait is capped at the lock's TTL: long enough that it
	// attempts only when a release wakes it.
	ttl := distlock.WithTTL(slack.D(time.Minute))

	lease, err := a.Acquire(ctx, key, ttl)
	require.NoError(t, err)
	before := lease.Token()
	type result struct {
		l   *distlock.Lease
		err error
	}
	waiter := make(chan result, 1)
	go func() {
		l, err := b.Acquire(ctx, key, ttl)
		waiter <- result{l, err}
	}()
	eventually(t, slack.D(5*time.Second), "the waiter's attempt marked the lock", func() bool {
		return src.HExists(ctx, keys.Lock, "w").Val()
	})

	// tryAcross starts a TryAcquire of c, waits until refused (from n on,
	// a counter of c's refusals) passes n, calls finish and checks that the
	// TryAcquire then finds the lock held.
	tryAcross := func(what string, refused *atomic.Int64, finish func()) {
		t.Helper()
		n := refused.Load()
		tried := make(chan error, 1)
		go func() {
			_, err := c.TryAcquire(ctx, key)
			tried <- err
		}()
		eventually(t, slack.D(5*time.Second), "the TryAcquire refused: "+what, func() bool { return refused.Load() > n })
		finish()
		select {
		case err := <-tried:
			if !errors.Is(err, distlock.ErrNotAcquired) || errors.Is(err, distlock.ErrUnavailable) {
				t.Errorf("TryAcquire started %s: %v, want ErrNotAcquired (held)", what, err)
			}
		case <-time.After(slack.D(5 * time.Second)):
			t.Fatalf("the TryAcquire started %s did not return after the move", what)
		}
	}

	// A TryAcquire during the split waits it out, then finds the lock held.
	there := newSlotMigration(t, ctx, cluster, slot, src, dst)
	there.begin()
	there.move(keys.Lock)
	tryAcross("while the slot was split (TRYAGAIN)", &cTried.n, there.finish)

	// The waiter, woken by a release during the split back, waits it out
	// and takes the lock.
	back := newSlotMigration(t, ctx, cluster, slot, dst, src)
	back.begin()
	back.move(keys.Lock)
	b0 := bTried.n.Load()
	require.NoError(t, lease.Release(ctx), "release during the split")
	eventually(t, slack.D(5*time.Second), "the woken waiter got TRYAGAIN", func() bool { return bTried.n.Load() > b0 })
	select {
	case r := <-waiter:
		t.Fatalf("the waiter returned while the slot was split: %v", r.err)
	default:
	}
	back.finish()
	select {
	case r := <-waiter:
		require.NoError(t, r.err, "waiter")
		if r.l.Token() <= before {
			t.Errorf("token %d after the split, %d before", r.l.Token(), before)
		}
		lease = r.l
	case <-time.After(slack.D(5 * time.Second)):
		t.Fatal("the waiter did not take the lock after the move")
	}

	// The source has assigned the slot to the target, which still imports
	// it: each redirects to the other.
	loop := newSlotMigration(t, ctx, cluster, slot, src, dst)
	loop.begin()
	loop.moveRest()
	loop.assign(src.Options().Addr)
	tryAcross("while the slot's owners redirected to each other (MOVED)", &cTried.redirects, loop.finish)

	// A split that outlasts the bound, and one that outlasts the caller's
	// ctx.
	again := newSlotMigration(t, ctx, cluster, slot, dst, src)
	again.begin()
	again.move(keys.Lock)
	start := time.Now()
	_, err = c.TryAcquire(ctx, key)
	took := time.Since(start)
	if !errors.Is(err, distlock.ErrUnavailable) || !goredis.IsTryAgainError(err) {
		t.Errorf("TryAcquire during a long split: %v, want ErrUnavailable caused by TRYAGAIN", err)
	}
	if took < tryAgainBound {
		t.Errorf("TryAcquire during a long split returned after %v, before the retry bound %v", took, tryAgainBound)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = c.TryAcquire(short, key)
	took = time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("TryAcquire whose ctx ended during a split: %v, want ErrNotAcquired and the ctx error", err)
	}
	if took >= tryAgainBound {
		t.Errorf("TryAcquire whose ctx (100ms) ended during a split returned after %v: its ctx did not cut the retries (up to %v) short", took, tryAgainBound)
	}
	again.finish()
	assert.NoError(t, lease.Release(ctx), "release after the moves")
}
