package redlock

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/netfault"
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

// TestWaitingEmptyAfterWaitsEnd: waiters refused at the gate by a young
// hold, which end by their ctx (deadline or cancel), some sharing one
// owner id, leave the driver's count of waiters empty: no lock stays gated
// and no owner counted as queued once every wait has ended.
func TestWaitingEmptyAfterWaitsEnd(t *testing.T) {
	_, a, b := twoLockers(t, WithNodeTimeout(slack.D(time.Second)))
	const key = "gatebreak/waiting"
	ctx := tctx(t, slack.D(30*time.Second))
	held, err := a.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	d := driverOf(b)
	attempts := countAttempts(b)
	const n = 6
	errs := make(chan error, n)
	cancels := make([]context.CancelFunc, n)
	for i := range n {
		wctx, cancel := context.WithTimeout(ctx, slack.D(time.Duration(100*(i%3+1))*time.Millisecond))
		cancels[i] = cancel
		opts := []distlock.Option{distlock.WithTTL(time.Minute)}
		if i%2 == 0 {
			opts = append(opts, distlock.WithOwner("shared"))
		}
		go func() {
			_, err := b.Acquire(wctx, key, opts...)
			errs <- err
		}()
	}
	// Some end by cancel while queued, the rest by their deadline.
	eventually(t, slack.D(10*time.Second), "waiters queued and refused at the gate", func() bool {
		return d.waiting.has(key) && attempts.Load() >= n
	})
	cancels[0]()
	cancels[3]()
	for range n {
		if err := <-errs; !errors.Is(err, distlock.ErrNotAcquired) && !errors.Is(err, context.Canceled) {
			t.Errorf("waiter: %v, want not acquired or cancelled", err)
		}
	}
	for _, cancel := range cancels {
		cancel()
	}
	d.waiting.mu.Lock()
	total, keys, owners := d.waiting.total.Load(), len(d.waiting.keys), len(d.waiting.owners)
	d.waiting.mu.Unlock()
	if total != 0 || keys != 0 || owners != 0 {
		t.Fatalf("after every wait ended: %d waiters counted, %d keys, %d owners; want none", total, keys, owners)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestGateLateReplyValidity: the gate grants at once but its reply comes
// late (most of the per-node timeout); the lease's deadline must not pass
// the expiry of the hold on any node that granted it, the gate included.
func TestGateLateReplyValidity(t *testing.T) {
	c := startCluster(t, 5)
	g, err := netfault.ListenGroup(c.addrs()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	nt := slack.D(400 * time.Millisecond)
	l := newTestLocker(t, g.Addrs(), WithNodeTimeout(nt))
	warm(t, l)
	const key = "gatebreak/validity"
	ctx := tctx(t, slack.D(30*time.Second))
	d := driverOf(l)
	// No node marked down (a warm-up round trip slower than the per-node
	// timeout, on a loaded machine): the gate is the top of the ranking.
	up := func() int {
		for _, nd := range d.nodes {
			nd.downUntil.Store(0)
		}
		return d.gateOf(key)
	}
	gate := up()
	// A waiter of this driver queued with this owner: the attempt is gated.
	d.waiting.add(key, "V")
	defer d.waiting.remove(key, "V")
	g.Proxies[gate].DelayReplies(nt * 3 / 4)
	ttl := 2 * nt
	lease, err := l.TryAcquire(ctx, key, distlock.WithOwner("V"), distlock.WithTTL(ttl))
	g.Proxies[gate].DelayReplies(0)
	if err != nil {
		t.Fatalf("gated TryAcquire with the gate's reply late: %v", err)
	}
	name := redislua.KeysFor(prefix, key).Lock
	// A quorum of the nodes holds the lock at least until the lease's
	// deadline. (Not every node: one may have missed the grant, or an
	// automatic refresh, and expires earlier.)
	holding := 0
	for i, admin := range c.admins {
		// The deadline first: an automatic refresh in between extends
		// the hold's expiry too.
		deadline, before := lease.Deadline(), time.Now()
		pttl, err := admin.PTTL(ctx, name).Result()
		if err != nil {
			t.Fatalf("node %d: PTTL: %v", i, err)
		}
		// PTTL is rounded down to the millisecond.
		if expiry := before.Add(pttl + time.Millisecond); pttl > 0 && !deadline.After(expiry) {
			holding++
		} else {
			t.Logf("node %d (gate %d): PTTL %v, lease deadline %v after the hold's expiry", i, gate, pttl, deadline.Sub(expiry))
		}
	}
	if holding < 3 {
		t.Errorf("%d nodes hold the lock until the lease's deadline, want a quorum of 3", holding)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The gate's reply comes after most of the validity, the others'
	// after the rest of it: the attempt fails (the validity counts from
	// the gate's request, not from the fan-out), and leaves nothing behind.
	ttl = 320 * time.Millisecond // validity 314.8ms
	gate = up()
	g.DelayReplies(40 * time.Millisecond)
	g.Proxies[gate].DelayReplies(290 * time.Millisecond)
	_, err = d.TryAcquire(ctx, backend.Request{Key: key, Owner: "V", TTL: ttl})
	g.DelayReplies(0)
	if err == nil {
		t.Fatalf("TryAcquire with TTL %v, the gate's reply 290ms late and the others' 40ms: acquired, want a failure (no validity left)", ttl)
	}
	eventually(t, slack.D(10*time.Second), "nothing left on the nodes", func() bool { return len(c.holders(t, prefix, key)) == 0 })
}

// TestGatedAndFanOutNeverOverlap: waiters of three Lockers that name the
// nodes differently — so their gates differ — (direct addresses; the
// same nodes through proxies, in reverse order; "localhost" names,
// rotated) and a Locker that only tries (never gated) contend for one lock
// while the proxied Locker's link to its gate node delays requests by
// most of the per-node timeout, then while the first Locker's gate node is
// paused (SIGSTOP) for half of it, and after. At no moment do two of them
// hold the lock.
func TestGatedAndFanOutNeverOverlap(t *testing.T) {
	c := startCluster(t, 5)
	c.controllable(t)
	addrs := c.addrs()
	g, err := netfault.ListenGroup(addrs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	nt := slack.D(200 * time.Millisecond)
	proxied := slices.Clone(g.Addrs())
	slices.Reverse(proxied)
	var local []string
	for i := range addrs {
		_, port, _ := net.SplitHostPort(addrs[(i+2)%len(addrs)])
		local = append(local, "localhost:"+port)
	}
	direct := newTestLocker(t, addrs, WithNodeTimeout(nt))
	lockers := []*testLocker{direct, newTestLocker(t, proxied, WithNodeTimeout(nt)), newTestLocker(t, local, WithNodeTimeout(nt)), newTestLocker(t, addrs, WithNodeTimeout(nt))}
	for _, l := range lockers {
		warm(t, l)
	}
	const key = "gatebreak/overlap"
	gate := driverOf(direct).gateOf(key)
	pgate := len(addrs) - 1 - driverOf(lockers[1]).gateOf(key) // its nodes in reverse
	ctx := tctx(t, slack.D(30*time.Second))
	var inside, overlaps, held atomic.Int64
	enter := func(lease *distlock.Lease) {
		if inside.Add(1) > 1 {
			overlaps.Add(1)
		}
		held.Add(1)
		time.Sleep(time.Millisecond)
		inside.Add(-1)
		_ = lease.Release(ctx)
	}
	// Every worker runs until the last fault has had its time, at most
	// maxIters rounds.
	const maxIters = 300
	run, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for li, l := range lockers {
		for range 2 {
			wg.Go(func() {
				for range maxIters {
					if run.Err() != nil {
						return
					}
					if li == len(lockers)-1 { // only tries: never gated
						if lease, err := l.TryAcquire(ctx, key, distlock.WithTTL(time.Minute)); err == nil {
							enter(lease)
						}
						time.Sleep(2 * time.Millisecond)
						continue
					}
					wctx, cancel := context.WithTimeout(run, slack.D(3*time.Second))
					lease, err := l.Acquire(wctx, key, distlock.WithTTL(time.Minute))
					cancel()
					if err == nil {
						enter(lease)
					}
				}
			})
		}
	}
	faults := []func(){
		func() { g.Proxies[pgate].DelayRequests(nt * 3 / 4) }, // the proxied Locker's link to its gate
		func() {
			// Paused for less than the per-node timeout: the attempts
			// under way there wait for it rather than time out (their
			// give-backs would retry in the background, which Close
			// waits for).
			g.Proxies[pgate].DelayRequests(0)
			_ = c.srvs[gate].Pause()
			time.Sleep(nt / 2)
			_ = c.srvs[gate].Resume()
		},
	}

	phases := make([]int64, 0, len(faults)+1)
	for _, f := range faults {
		time.Sleep(slack.D(300 * time.Millisecond))
		phases = append(phases, held.Load())
		f()
	}
	time.Sleep(slack.D(300 * time.Millisecond))
	phases = append(phases, held.Load())
	stop()
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("%d times two holders at once", n)
	}
	if k := len(phases) - 1; phases[k] == phases[k-1] {
		t.Fatalf("no one held the lock after the gate node was paused: %v", phases)
	}
	t.Logf("acquisitions before each fault (delay, pause) and by the end: %v", phases)
}

// TestDeadGateHandsOverToTheNextNode: the lock's gate node is dead (marked
// down): a woken waiter's attempt asks the next node in the gate's ranking
// alone, as it asked the gate — one script — instead of fanning out to
// every live node, where the woken waiters of several Lockers split the
// votes again for as long as the node stays dead.
func TestDeadGateHandsOverToTheNextNode(t *testing.T) {
	c, a, b := twoLockers(t, WithNodeTimeout(slack.D(time.Second)))
	c.controllable(t)
	const key = "gatebreak/deadgate"
	ctx := tctx(t, slack.D(30*time.Second))
	dead := driverOf(b).gateOf(key)
	c.kill(t, dead)
	live := slices.Delete(slices.Clone(c.admins), dead, dead+1)
	scripts := func() int64 { return (&cluster{admins: live}).evalshas(t) }
	held, err := a.Acquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	attempts := countAttempts(b)
	got := make(chan error, 1)
	go func() {
		// No fallback wake-up within the test: only notifications wake
		// the waiter (the dead node's subscription may, when it drops).
		lease, err := b.Acquire(ctx, key, distlock.WithRetry(distlock.Backoff{Min: time.Minute, Max: time.Minute}))
		if err == nil {
			err = lease.Release(ctx)
		}
		got <- err
	}()
	// settled waits until the waiter's attempts have stopped, and
	// returns the scripts run on the live nodes and the attempts so far.
	settled := func(what string, after int64) (int64, int64) {
		var s, n int64 = -1, -1
		eventually(t, slack.D(10*time.Second), what, func() bool {
			time.Sleep(100 * time.Millisecond)
			s2, n2 := scripts(), attempts.Load()
			same := s2 == s && n2 == n
			s, n = s2, n2
			return same && n > after
		})
		return s, n
	}
	// The first attempt (which finds the dead node down), then the one
	// after subscribing, both decided.
	before, n := settled("the waiter's first two attempts", 1)
	// Found down again just now (an attempt's request to it failed):
	// the mark lasts a second, which a loaded machine may have spent.
	driverOf(b).nodes[dead].markDown(driverOf(b))
	if err := live[0].Publish(ctx, driverOf(b).keys(key).Channel, "x").Err(); err != nil {
		t.Fatal(err)
	}
	after, m := settled("the woken waiter's attempt", n)
	if ds, da := after-before, m-n; ds != da {
		t.Fatalf("the waiter's %d attempts after a wake-up ran %d scripts over the live nodes, want one each (at the next node after the dead gate)", da, ds)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter after the release: %v", err)
	}
}

// TestGateRefusedWaiterWithoutAnnouncement: a waiter refused at the gate
// by a young hold waits for an announcement there; when none comes (the
// holder's holds vanish without a release message: a lost message, a
// crash and expiry), it still takes the lock within the notification
// fallback (1s), not at its ctx's end.
func TestGateRefusedWaiterWithoutAnnouncement(t *testing.T) {
	c, a, b := twoLockers(t, WithNodeTimeout(slack.D(time.Second)))
	const key = "gatebreak/unannounced"
	ctx := tctx(t, slack.D(30*time.Second))
	if _, err := a.TryAcquire(ctx, key, distlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	d := driverOf(b)
	attempts := countAttempts(b)
	got := acquireAndRelease(ctx, b, key)
	eventually(t, slack.D(10*time.Second), "the waiter refused at the gate", func() bool {
		return d.waiting.has(key) && attempts.Load() >= 2
	})
	name := redislua.KeysFor(prefix, key).Lock
	for _, admin := range c.admins {
		if err := admin.Del(ctx, name).Err(); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter: %v", err)
		}
	case <-time.After(slack.D(3 * time.Second)):
		t.Fatal("the waiter is still waiting 3s after the lock vanished unannounced")
	}
	t.Logf("the waiter took the lock %v after it vanished", time.Since(start).Round(time.Millisecond))
}
