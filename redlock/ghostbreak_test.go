package redlock

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// ghostRig is 5 nodes, a Locker l whose link to node 0 goes through a
// proxy (the rest direct), with its connections open, and the key's lock
// held by a dead owner on the given nodes.
type ghostRig struct {
	c    *cluster
	link *netfault.Proxy
	l    *testLocker
	name string
}

const ghostKey = "ghost/break"

func newGhostRig(t *testing.T, nodeTimeout time.Duration, held ...int) *ghostRig {
	t.Helper()
	c := startCluster(t, 5)
	addrs := c.addrs()
	g, err := netfault.ListenGroup(addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	l := newTestLocker(t, append(g.Addrs(), addrs[1:]...), WithNodeTimeout(nodeTimeout))
	for _, nd := range driverOf(l).nodes {
		if err := nd.client.(*goredis.Client).Ping(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	warm(t, l)
	holdMinorities(t, c, ghostKey, time.Minute, held...)
	return &ghostRig{c: c, link: g.Proxies[0], l: l, name: redislua.KeysFor(prefix, ghostKey).Lock}
}

// free deletes the dead owner's hold on the given nodes.
func (r *ghostRig) free(t *testing.T, nodes ...int) {
	t.Helper()
	for _, i := range nodes {
		if err := r.c.admins[i].Del(t.Context(), r.name).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// failWithNode0Late makes one attempt of l that fails (nodes 1–3 busy)
// while its request to node 0 is held on the link for delay: node 0 is
// free, so it grants late.
func (r *ghostRig) failWithNode0Late(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	if _, err := r.l.TryAcquire(ctx, ghostKey); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("%s: %v, want ErrNotAcquired", what, err)
	}
}

// settled waits until nothing of l's attempts is left on any node but the
// dead owner's holds on nodes held, and no tracking is left.
func (r *ghostRig) settled(t *testing.T, held ...int) {
	t.Helper()
	eventually(t, slack.D(20*time.Second), "only the dead owner's holds left, no tracking", func() bool {
		return slices.Equal(r.c.holders(t, prefix, ghostKey), held) && driverOf(r.l).releasing.n.Load() == 0
	})
}

// TestTrackedWaitEndsAtCtxDuringGiveBack: the next attempt waits on node 0
// for the failed attempt's late grant to be given back; its caller's ctx
// ends while that give-back is on its way. The attempt must end at once
// (it needs node 0: 2 nodes free, 2 busy), and after everything settles
// no hold of l is left and nothing is tracked.
func TestTrackedWaitEndsAtCtxDuringGiveBack(t *testing.T) {
	T := slack.D(5 * time.Second)
	r := newGhostRig(t, T, 1, 2, 3, 4)
	const delay = 600 * time.Millisecond
	r.link.DelayRequests(delay) // the request lands at delay, the give-back at 2·delay
	ctx := tctx(t, slack.D(30*time.Second))
	r.failWithNode0Late(t, ctx, "first attempt")
	if driverOf(r.l).releasing.of(r.name) == nil {
		t.Fatal("node 0 not tracked")
	}
	r.free(t, 3, 4)
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		time.Sleep(delay + delay/2) // the give-back is on its way
		cancel()
	}()
	start := time.Now()
	_, err := r.l.TryAcquire(cctx, ghostKey)
	took := time.Since(start)
	if err == nil || cctx.Err() == nil {
		t.Fatalf("attempt needing node 0: %v after %v (ctx %v), want the ctx's end", err, took, cctx.Err())
	}
	if over := took - (delay + delay/2); over > slack.D(300*time.Millisecond) {
		t.Fatalf("attempt returned %v after its ctx ended (%v)", over, err)
	}
	t.Logf("attempt: %v after %v", err, took)
	r.settled(t, 1, 2)
}

// TestSecondFailedAttemptKeepsFirstsGiveBack: attempt A fails with its
// request to node 0 still on its way; node 0 grants it late, and its
// give-back is slow. Attempt B of the same Locker fails at once too
// (nodes 1–3 busy), its node 0 waiting behind A's give-back: its tracking
// replaces A's. B's node 0 stops waiting at B's per-node deadline,
// before A's give-back has landed. A third attempt C, which needs node 0,
// must still not find A's grant there: it waits for A's give-back.
func TestSecondFailedAttemptKeepsFirstsGiveBack(t *testing.T) {
	T := slack.D(2 * time.Second)
	r := newGhostRig(t, T, 1, 2, 3)
	d, g := T*6/10, T*7/10
	// A's request lands at d; A's give-back, sent then, lands at d+g =
	// 1.3T: after B's per-node deadline (B starts at once, so about T),
	// and well before the give-back's own per-node timeout (d+T), so
	// that it is answered, not left to the background retry, when A's
	// node 0 counts as answered.
	r.link.DelayRequests(d)
	ctx := tctx(t, slack.D(30*time.Second))
	start := time.Now()
	r.failWithNode0Late(t, ctx, "attempt A")
	t.Logf("A failed at %v", time.Since(start))
	pa := driverOf(r.l).releasing.of(r.name)
	if pa == nil {
		t.Fatal("A's node 0 not tracked")
	}
	r.link.DelayRequests(g)
	r.failWithNode0Late(t, ctx, "attempt B")
	t.Logf("B failed at %v", time.Since(start))
	if time.Since(start) > d {
		t.Skipf("attempt B ended after A's request landed (%v): the machine is too slow for this interleaving", d)
	}
	if driverOf(r.l).releasing.of(r.name) == pa {
		t.Log("B's tracking did not replace A's")
	}
	r.free(t, 1)
	// B's node 0 gives up at B's deadline; then C's request to node 0
	// goes without delay (A's give-back keeps the one it got).
	eventually(t, slack.D(10*time.Second), "B's node 0 to give up", func() bool {
		pb := driverOf(r.l).releasing.of(r.name)
		return pb == nil || pb.wait(0) == nil
	})
	r.link.DelayRequests(0)
	t.Logf("C starts at %v", time.Since(start))
	lc, err := r.l.TryAcquire(ctx, ghostKey)
	t.Logf("C ends at %v: %v", time.Since(start), err)
	if err != nil {
		t.Fatalf("attempt C with nodes 0, 1 and 4 free but for A's late grant: %v; owners %q", err, r.c.owners(t, prefix, ghostKey))
	}
	if err := lc.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r.settled(t, 2, 3)
}

// TestCloseDuringGiveBack: a failed attempt's late grant on node 0 is being
// given back (the give-back is held on the link far beyond the per-node
// timeout) when the Locker is closed. Close returns within the per-node
// timeout and the background undo's bound, without a panic, and the late
// grant is gone from node 0 by its TTL at the latest.
func TestCloseDuringGiveBack(t *testing.T) {
	T := slack.D(time.Second)
	r := newGhostRig(t, T, 1, 2, 3, 4)
	rt := trackRoundTrips(r.l, 0)[0]
	const delay, ttl = 300 * time.Millisecond, 3 * time.Second
	r.link.DelayRequests(delay)
	ctx := tctx(t, slack.D(30*time.Second))
	if _, err := r.l.TryAcquire(ctx, ghostKey, distlock.WithTTL(ttl)); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("attempt: %v, want ErrNotAcquired", err)
	}
	r.link.DelayRequests(2 * ttl) // the give-back lands after the TTL
	sent := rt.started.Load()
	eventually(t, slack.D(10*time.Second), "the give-back to be sent", func() bool { return rt.started.Load() > sent })
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- r.l.Close() }()
	select {
	case err := <-done:
		t.Logf("Close: %v after %v", err, time.Since(start))
	case <-time.After(T + undoTimeout + slack.D(2*time.Second)):
		t.Fatalf("Close still running after %v", time.Since(start))
	}
	r.link.Heal()
	eventually(t, ttl+slack.D(10*time.Second), "the late grant gone from node 0", func() bool {
		return slices.Equal(r.c.holders(t, prefix, ghostKey), []int{1, 2, 3, 4})
	})
}

// TestNextAttemptBoundedWhenFailedNodeSilent: a failed attempt's request to
// node 0 is held on the link (blackholed) and never answered. The same
// Locker's next attempts, which need node 0, each end within the per-node
// timeout (they do not wait for that answer past it); once the link heals
// the held request lands late and its grant is undone: nothing of the
// Locker is left on any node and nothing stays tracked.
func TestNextAttemptBoundedWhenFailedNodeSilent(t *testing.T) {
	T := slack.D(500 * time.Millisecond)
	r := newGhostRig(t, T, 1, 2, 3, 4)
	r.link.Blackhole()
	ctx := tctx(t, slack.D(30*time.Second))
	r.failWithNode0Late(t, ctx, "first attempt")
	r.free(t, 3, 4)
	for i := range 3 {
		start := time.Now()
		actx := tctx(t, slack.D(30*time.Second))
		_, err := r.l.TryAcquire(actx, ghostKey)
		took := time.Since(start)
		if err == nil || actx.Err() != nil || took > T+slack.D(time.Second) {
			t.Fatalf("attempt %d needing the silent node: %v after %v, want a failure within the per-node timeout %v", i, err, took, T)
		}
		t.Logf("attempt %d: %v after %v", i, err, took)
	}
	r.link.Heal()
	r.settled(t, 1, 2)
}

// TestNextAttemptWaitsForDelayedReplyAndGiveBack: the failed attempt's
// request reaches node 0 at once and is granted there, but the reply is
// held on the link, and so is the give-back's. The next attempt, which
// needs node 0, waits for both and is granted there.
func TestNextAttemptWaitsForDelayedReplyAndGiveBack(t *testing.T) {
	T := slack.D(5 * time.Second)
	r := newGhostRig(t, T, 1, 2, 3, 4)
	const delay = 400 * time.Millisecond
	r.link.DelayReplies(delay)
	ctx := tctx(t, slack.D(30*time.Second))
	r.failWithNode0Late(t, ctx, "first attempt")
	if got := r.c.holders(t, prefix, ghostKey); !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
		t.Logf("holders right after the failed attempt: %v (its grant on node 0 not there yet)", got)
	}
	r.free(t, 3, 4)
	start := time.Now()
	lb, err := r.l.TryAcquire(ctx, ghostKey)
	if err != nil {
		t.Fatalf("attempt with nodes 0, 3 and 4 free but for the failed attempt's grant: %v after %v; owners %q", err, time.Since(start), r.c.owners(t, prefix, ghostKey))
	}
	t.Logf("granted after %v", time.Since(start))
	r.link.DelayReplies(0)
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r.settled(t, 1, 2)
}
