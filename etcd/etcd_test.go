package etcd

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/soak"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// testTTL is the session lease TTL of these tests' Lockers.
const testTTL = 4 * time.Second

// expectBusy fails t unless TryAcquire of key on l reports the lock held.
func expectBusy(t *testing.T, l *distlock.Locker, key, why string) {
	t.Helper()
	lease, err := l.TryAcquire(ctxT(t, 10*time.Second), key)
	if err == nil {
		_ = lease.Release(context.Background())
		t.Fatalf("%s: a second owner acquired the lock", why)
	}
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("%s: TryAcquire = %v, want ErrNotAcquired", why, err)
	}
}

// holderAndRival returns two Lockers on endpoints with session TTL ttl and
// one prefix, and the first one's lease on "k".
func holderAndRival(t *testing.T, endpoints []string, ttl time.Duration) (a, b *distlock.Locker, lease *distlock.Lease) {
	t.Helper()
	prefix := uniquePrefix(t)
	a = dialT(t, endpoints, WithSessionTTL(ttl), WithPrefix(prefix))
	b = dialT(t, endpoints, WithSessionTTL(ttl), WithPrefix(prefix))
	lease, err := a.Acquire(ctxT(t, 10*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	return a, b, lease
}

// TestLeaderKilledWhileHeld: the leader is killed while a lock is held; a
// new leader is elected and the lock is kept, with no second holder, then
// the old leader rejoins.
func TestLeaderKilledWhileHeld(t *testing.T) {
	t.Parallel()
	c := exclusiveCluster(t)
	needControl(t)
	_, b, lease := holderAndRival(t, c.Addrs(), testTTL)
	leader, err := testserver.EtcdLeader(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := leader.Restart(ctxT(t, time.Minute)); err != nil {
			t.Errorf("restart of the old leader: %v", err)
		}
	}()
	// Past the lease TTL: the lease is kept alive through the new leader.
	end := time.Now().Add(testTTL + time.Second)
	for time.Now().Before(end) {
		if err := lease.Err(); err != nil {
			t.Fatalf("lease ended after the leader was killed: %v", err)
		}
		expectBusy(t, b, "k", "leader killed")
		time.Sleep(200 * time.Millisecond)
	}
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("Release after the leader change: %v", err)
	}
	mustAcquireRelease(t, b, "k")
}

// TestMinorityPaused: a follower stops (a minority cut off from the
// cluster); the holder keeps its lock through the majority, a waiter keeps
// waiting, and gets the lock when it is released.
func TestMinorityPaused(t *testing.T) {
	t.Parallel()
	c := exclusiveCluster(t)
	needControl(t)
	_, b, lease := holderAndRival(t, c.Addrs(), testTTL)
	f, err := testserver.EtcdFollower(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := f.Resume(); err != nil {
			t.Error(err)
		}
	}()
	got := make(chan error, 1)
	go func() {
		l, err := b.Acquire(ctxT(t, time.Minute), "k")
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("waiter returned while the lock was held: %v", err)
	case <-time.After(testTTL + time.Second):
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("lease ended with a minority paused: %v", err)
	}
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter after the release: %v", err)
	}
}

// TestClientPartitionedPastTTL: the holder is cut off from every member for
// longer than its lease TTL. Its lease must end (Done) before another
// client can take the lock; the margin between the two is logged.
func TestClientPartitionedPastTTL(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	prefix := uniquePrefix(t)
	link, err := netfault.ListenGroup(c.Addrs()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	a := dialT(t, link.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix))
	b := dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix))
	lease, err := a.Acquire(ctxT(t, 10*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	var lostAt atomic.Int64
	go func() {
		<-lease.Done()
		lostAt.Store(time.Now().UnixNano())
	}()
	link.Blackhole()
	cut := time.Now()
	other, err := b.Acquire(ctxT(t, 3*testTTL), "k")
	if err != nil {
		t.Fatalf("no takeover after the holder was cut off: %v", err)
	}
	took := time.Now()
	lost := lostAt.Load()
	if lost == 0 {
		t.Fatalf("another client acquired the lock %v after the cut, and the cut-off holder's lease has not ended", took.Sub(cut))
	}
	if !errors.Is(lease.Err(), distlock.ErrLockLost) {
		t.Errorf("cut-off lease ended with %v, want ErrLockLost", lease.Err())
	}
	t.Logf("holder's lease ended %v after the cut, %v before the takeover (lease TTL %v)",
		time.Unix(0, lost).Sub(cut).Round(time.Millisecond), took.Sub(time.Unix(0, lost)).Round(time.Millisecond), testTTL)
	if err := other.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	link.Heal()
	if err := lease.Release(ctxT(t, 10*time.Second)); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Release of the lost lease: %v, want ErrNotHeld", err)
	}
}

// TestLeaseRevoked: an operator revokes the session's lease; every lock of
// the session ends with ErrLockLost, and the Locker gets a new session.
func TestLeaseRevoked(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	admin := adminClient(t, c.Addrs()...)
	a := dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(uniquePrefix(t)))
	l1, err := a.Acquire(ctxT(t, 10*time.Second), "k1")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := a.Acquire(ctxT(t, 10*time.Second), "k2")
	if err != nil {
		t.Fatal(err)
	}
	id := sessionOf(a).LeaseID()
	if _, err := admin.Revoke(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*distlock.Lease{l1, l2} {
		select {
		case <-l.Done():
		case <-time.After(2 * testTTL):
			t.Fatalf("lease of %s still live after its session lease was revoked", l.Key())
		}
		if !errors.Is(l.Err(), distlock.ErrLockLost) {
			t.Errorf("%s: Err = %v, want ErrLockLost", l.Key(), l.Err())
		}
	}
	mustAcquireRelease(t, a, "k1")
	if sessionOf(a).LeaseID() == id || sessionOf(a).LeaseID() == 0 {
		t.Errorf("lease id %x after the revoke, want a new one", sessionOf(a).LeaseID())
	}
}

// TestHerdOneWatchPerWaiter: each waiter watches only its predecessor, so
// one release wakes one waiter, not one per waiter.
func TestHerdOneWatchPerWaiter(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	const n = 20
	prefix := uniquePrefix(t)
	holder := dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix))
	w := dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix))
	lease, err := holder.Acquire(ctxT(t, 10*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var wg sync.WaitGroup
	acquired := make(chan *distlock.Lease, n)
	for range n {
		wg.Go(func() {
			l, err := w.Acquire(ctxT(t, time.Minute), "k")
			if err != nil {
				t.Error(err)
				return
			}
			acquired <- l
			<-release
			_ = l.Release(context.Background())
		})
	}
	waitFor(t, 30*time.Second, "every waiter watching", func() bool { return driverOf(w).stats.watches.Load() >= n })
	time.Sleep(200 * time.Millisecond) // no stray watch comes late
	watches, reads, wakeups := driverOf(w).stats.watches.Load(), driverOf(w).stats.reads.Load(), driverOf(w).stats.wakeups.Load()
	if watches != n {
		t.Errorf("%d waiters opened %d watches, want one each", n, watches)
	}
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-acquired:
	case <-time.After(30 * time.Second):
		t.Fatal("no waiter acquired after the release")
	}
	time.Sleep(200 * time.Millisecond)
	// Wake-ups, not reads, are the herd: a watch that the member cancels
	// (it lost its leader: an election, which a starved cluster holds
	// now and then) also makes its waiter read the queue again.
	if dw := driverOf(w).stats.wakeups.Load() - wakeups; dw != 1 {
		t.Errorf("one release woke %d waiters, want 1 (herd effect)", dw)
	}
	t.Logf("one release: %d predecessor reads", driverOf(w).stats.reads.Load()-reads)
	close(release)
	wg.Wait()
}

// TestCompactionWhileWaiting: the revision a waiter watches from is
// compacted before its watch starts (and the holder released meanwhile):
// the waiter reads the queue again and gets the lock.
func TestCompactionWhileWaiting(t *testing.T) {
	t.Parallel()
	c := exclusiveCluster(t)
	admin := adminClient(t, c.Addrs()...)
	prefix := uniquePrefix(t)
	holder := dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix))
	lease, err := holder.Acquire(ctxT(t, 10*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	hooks := &testHooks{beforeWatch: func(string, int64) {
		once.Do(func() {
			if err := lease.Release(context.Background()); err != nil {
				t.Error(err)
			}
			resp, err := admin.Put(context.Background(), prefix+"-filler", "x")
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := admin.Compact(context.Background(), resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
				t.Error(err)
			}
		})
	}}
	w := dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix), withHooks(hooks))
	l, err := w.Acquire(ctxT(t, 30*time.Second), "k")
	if err != nil {
		t.Fatalf("waiter after compaction: %v", err)
	}
	if n := driverOf(w).stats.compacted.Load(); n != 1 {
		t.Errorf("%d watches saw their revision compacted, want 1", n)
	}
	if l.Token() <= lease.Token() {
		t.Errorf("token %d after %d", l.Token(), lease.Token())
	}
	if err := l.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestThousandWaitersInOrder: 1,000 waiters queue on one key at once;
// they get the lock one after the other in the order in which the cluster
// queued them (the create revisions of their waiter keys, which are also
// their tokens), each once. It has a cluster of its own: its burst of
// 1,000 writes would hold up the other tests' requests on the shared one.
func TestThousandWaitersInOrder(t *testing.T) {
	t.Parallel()
	c := exclusiveCluster(t)
	n := 100 // the order of a queue; its size is soak's (make soak: 1,000)
	if soak.Enabled() {
		n = 1000
	}
	prefix := uniquePrefix(t)
	// Queue order is what this test checks, not session liveness: a TTL
	// that a starved machine cannot exhaust keeps every waiter in its
	// place (a lost session re-queues its waiters at the back).
	const ttl = 30 * time.Second
	holder := dialT(t, c.Addrs(), WithSessionTTL(ttl), WithPrefix(prefix))
	w := dialT(t, c.Addrs(), WithSessionTTL(ttl), WithPrefix(prefix))
	lease, err := holder.Acquire(ctxT(t, 10*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	// Queueing 1,000 waiters took about 55 s, serving them 51 s, with
	// -race on two cores shared by a load of about 50.
	ctx := ctxT(t, slack.D(5*time.Minute))
	var (
		mu     sync.Mutex
		tokens []uint64
		wg     sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			l, err := w.Acquire(ctx, "k")
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			tokens = append(tokens, l.Token())
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d: Release: %v", i, err)
			}
		})
	}
	waitFor(t, slack.D(3*time.Minute), "every waiter queued", func() bool {
		info, err := holder.Inspect(ctx, "k")
		return err == nil && info.Waiters == n
	})
	start := time.Now()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	t.Logf("%d waiters served in %v", n, time.Since(start).Round(time.Millisecond))
	if len(tokens) != n {
		t.Fatalf("%d of %d waiters acquired", len(tokens), n)
	}
	for i := 1; i < n; i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("acquisition %d has token %d after %d: not in queue order", i, tokens[i], tokens[i-1])
		}
	}
	if driverOf(w).stats.watches.Load() > int64(2*n) {
		t.Errorf("%d waiters opened %d watches", n, driverOf(w).stats.watches.Load())
	}
}

// TestDurableClusterRestart: the whole cluster restarts with its data while
// a lock is held; the lock is kept (same token, the holder's lease live, a
// second owner refused).
func TestDurableClusterRestart(t *testing.T) {
	t.Parallel()
	c := exclusiveCluster(t)
	needControl(t)
	_, b, lease := holderAndRival(t, c.Addrs(), 10*time.Second)
	start := time.Now()
	if err := stopCluster(c); err != nil {
		t.Fatal(err)
	}
	if err := startCluster(ctxT(t, time.Minute), c); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster restarted in %v", time.Since(start).Round(time.Millisecond))
	expectBusy(t, b, "k", "after the restart")
	info, err := b.Inspect(ctxT(t, 10*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	if info.Token != lease.Token() || info.Owner != lease.Owner() {
		t.Errorf("after the restart the holder is %+v, want token %d owner %s", info, lease.Token(), lease.Owner())
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("lease ended with the restart: %v", err)
	}
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestKeysDoNotCollide: "/" and "%" in keys cannot make one lock's waiter
// keys fall under another's prefix.
func TestKeysDoNotCollide(t *testing.T) {
	t.Parallel()
	keys := []string{"a", "a/b", "a%2Fb", "a/", "/a", "%", "a b", "ключ", "a\x00b"}
	seen := map[string]string{}
	for _, k := range keys {
		e := escapeKey(k)
		if prev, dup := seen[e]; dup {
			t.Errorf("%q and %q both escape to %q", prev, k, e)
		}
		seen[e] = k
		if back, err := url.PathUnescape(e); err != nil || back != k {
			t.Errorf("escape of %q does not invert: %q, %v", k, back, err)
		}
		for _, other := range keys {
			if other != k && len(escapeKey(other)) > len(e) && escapeKey(other)[:len(e)+1] == e+"/" {
				t.Errorf("%q's prefix contains %q's", other, k)
			}
		}
	}
}

// TestBadOptions: option values are checked by New and Dial.
func TestBadOptions(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]Option{
		"ttl 1s":         {WithSessionTTL(time.Second)},
		"ttl 2.5s":       {WithSessionTTL(2500 * time.Millisecond)},
		"margin 0":       {WithSessionMargin(0)},
		"margin too big": {WithSessionTTL(4 * time.Second), WithSessionMargin(2 * time.Second)},
		"prefix":         {WithPrefix("no-slash")},
		"prefix /":       {WithPrefix("/")},
		"prefix end /":   {WithPrefix("/a/")},
		"connect":        {WithConnectTimeout(-time.Second)},
		"auth no user":   {WithAuth("", "pw")},
		"auth no pw":     {WithAuth("root", "")},
		"tls nil":        {WithTLS(nil)},
	} {
		if _, err := Dial([]string{"127.0.0.1:1"}, opts...); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := New(nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("New(nil): %v", err)
	}
	if _, err := Dial(nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("Dial(nil): %v", err)
	}
}

func mustAcquireRelease(t *testing.T, l *distlock.Locker, key string) {
	t.Helper()
	lease, err := l.Acquire(ctxT(t, 20*time.Second), key)
	if err != nil {
		t.Fatalf("acquire %s: %v", key, err)
	}
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("release %s: %v", key, err)
	}
}

// TestForceReleaseEndsLease: an operator's ForceRelease deletes the
// holder's key; the holder's watch ends its lease at once with
// ErrLockLost, and the next holder's token is higher.
func TestForceReleaseEndsLease(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	a, b, lease := holderAndRival(t, c.Addrs(), testTTL)
	info, err := b.ForceRelease(ctxT(t, 10*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	if info.Token != lease.Token() {
		t.Errorf("evicted %+v, want token %d", info, lease.Token())
	}
	select {
	case <-lease.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the evicted holder's lease did not end")
	}
	if !errors.Is(lease.Err(), distlock.ErrLockLost) {
		t.Errorf("evicted lease: Err = %v, want ErrLockLost", lease.Err())
	}
	next, err := b.Acquire(ctxT(t, 10*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= lease.Token() {
		t.Errorf("token %d after the evicted %d", next.Token(), lease.Token())
	}
	if err := next.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	mustAcquireRelease(t, a, "k")
}

// TestNoHoldWatch: with WithHoldWatch(false) a holder whose key an operator
// deleted learns of it at its next Refresh (ErrNotHeld, and the lease ends
// with ErrLockLost).
func TestNoHoldWatch(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	prefix := uniquePrefix(t)
	a := dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix), WithHoldWatch(false))
	b := dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix))
	lease, err := a.Acquire(ctxT(t, 10*time.Second), "k", distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ForceRelease(ctxT(t, 10*time.Second), "k"); err != nil {
		t.Fatal(err)
	}
	if err := lease.Refresh(ctxT(t, 10*time.Second), time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Refresh after the forced release: %v, want ErrNotHeld", err)
	}
	if !errors.Is(lease.Err(), distlock.ErrLockLost) {
		t.Errorf("lease after a refused Refresh: Err = %v, want ErrLockLost", lease.Err())
	}
}

// TestRefreshNeedsQuorum: Refresh confirms a lock only with the cluster's
// agreement, never from one member's local state. A Locker connected to
// one member whose peers are paused (a member cut off from the majority,
// which may have deleted the key meanwhile) must not be told "held".
func TestRefreshNeedsQuorum(t *testing.T) {
	t.Parallel()
	c := exclusiveCluster(t)
	needControl(t)
	x, err := testserver.EtcdFollower(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	a := dialT(t, []string{x.Addr()}, WithSessionTTL(testTTL), WithPrefix(uniquePrefix(t)), WithHoldWatch(false))
	lease, err := a.Acquire(ctxT(t, 10*time.Second), "k", distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	var paused []*testserver.Server
	resume := func() {
		for _, s := range paused {
			if err := s.Resume(); err != nil {
				t.Error(err)
			}
		}
		paused = nil
	}
	defer resume()
	for _, s := range c.Servers {
		if s != x {
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
			paused = append(paused, s)
		}
	}
	err = lease.Refresh(ctxT(t, time.Second), time.Minute)
	if err == nil {
		t.Errorf("Refresh through a member cut off from the majority confirmed the lock: answered from its local state")
	} else if errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Refresh through a member cut off from the majority: %v, want a failure to reach the cluster", err)
	} else {
		t.Logf("Refresh through a member cut off from the majority: %v", err)
	}
	resume()
	if err := c.WaitReady(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := lease.Refresh(ctxT(t, 10*time.Second), time.Minute); err != nil {
		t.Errorf("Refresh with the majority back: %v", err)
	}
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Error(err)
	}
}
