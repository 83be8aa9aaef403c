package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/soak"
)

// restartHoldWatch ends the hold watch's current stream, as a member that
// cancels it would.
func (d *driver) restartHoldWatch() {
	d.mu.Lock()
	stop := d.hw.stop
	d.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// heldKey returns the one waiter key of lock name under prefix: its
// holder's. It may be called from the hooks' goroutines.
func heldKey(t *testing.T, admin *clientv3.Client, prefix, name string) string {
	t.Helper()
	keys, err := waiterKeys(context.Background(), admin, prefix+"/"+escapeKey(name))
	if err != nil || len(keys) != 1 {
		t.Errorf("waiter keys of %s: %v, %v; want one", name, keys, err)
		return prefix + "/none"
	}
	return keys[0]
}

// expectLost fails t unless lease ends with ErrLockLost within d.
func expectLost(t *testing.T, lease *distlock.Lease, d time.Duration, what string) {
	t.Helper()
	select {
	case <-lease.Done():
	case <-time.After(slack.D(d)):
		t.Fatalf("%s: the lease did not end", what)
	}
	if !errors.Is(lease.Err(), distlock.ErrLockLost) {
		t.Errorf("%s: Err = %v, want ErrLockLost", what, lease.Err())
	}
}

// acquireT acquires name on l or fails t.
func acquireT(t *testing.T, l *distlock.Locker, name string) *distlock.Lease {
	t.Helper()
	lease, err := l.Acquire(ctxT(t, 20*time.Second), name)
	if err != nil {
		t.Fatalf("acquire %s: %v", name, err)
	}
	return lease
}

// releaseT releases lease or fails t: a lease whose key was deleted
// meanwhile fails with ErrNotHeld.
func releaseT(t *testing.T, lease *distlock.Lease) {
	t.Helper()
	if err := lease.Release(ctxT(t, 20*time.Second)); err != nil {
		t.Errorf("release %s: %v", lease.Key(), err)
	}
}

// TestHeldLocksShareOneWatch: the locks a Locker holds are watched by one
// watch, not one each: holding 200 locks adds a bounded number of
// goroutines, and a forced release of one of them still ends exactly that
// lease with ErrLockLost. It does not run in parallel with other tests,
// which would add goroutines of their own.
func TestHeldLocksShareOneWatch(t *testing.T) {
	c := cluster(t)
	prefix := uniquePrefix(t)
	a := dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix))
	b := dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix))
	ctx := ctxT(t, time.Minute)
	warm := acquireT(t, a, "warm")
	defer releaseT(t, warm)
	const n = 200
	g0 := runtime.NumGoroutine()
	leases := make([]*distlock.Lease, n)
	for i := range leases {
		leases[i] = acquireT(t, a, fmt.Sprintf("k%d", i))
	}
	if added := runtime.NumGoroutine() - g0; added > 20 {
		t.Errorf("holding %d locks added %d goroutines, want O(1)", n, added)
	}
	if _, err := b.ForceRelease(ctx, "k7"); err != nil {
		t.Fatal(err)
	}
	expectLost(t, leases[7], 10*time.Second, "k7, force-released")
	for i, l := range leases {
		if i != 7 {
			releaseT(t, l)
		}
	}
	if n := driverOf(a).stats.holdWatch.Load(); n != 1 {
		t.Errorf("%d hold watch streams, want 1", n)
	}
}

// TestHoldKeyDeletedDuringWatchRestart: held keys are deleted while the
// hold watch is being set up again after its stream ended: before its
// read of the held keys (x), after that read and before the new stream
// opens (y), deleted and created again with the same name by another
// client before the read (z: another create revision), and a lock granted
// after the watch listed the held keys to read (n), its key deleted before
// the read: neither that read nor the new stream tells of it, n is read
// on its own. Each of those leases ends with ErrLockLost; the lock untouched
// (w) stays held.
func TestHoldKeyDeletedDuringWatchRestart(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	admin := adminClient(t, c.Addrs()...)
	prefix := uniquePrefix(t)
	var (
		restarting atomic.Bool
		a          *distlock.Locker
		n          *distlock.Lease
		openOnce   sync.Once
	)
	opened := make(chan struct{})
	hooks := &testHooks{
		holdRestart: func() {
			if !restarting.CompareAndSwap(false, true) {
				return
			}
			ctx := context.Background()
			if _, err := admin.Delete(ctx, heldKey(t, admin, prefix, "x")); err != nil {
				t.Error(err)
			}
			z := heldKey(t, admin, prefix, "z")
			if _, err := admin.Delete(ctx, z); err != nil {
				t.Error(err)
			}
			if _, err := admin.Put(ctx, z, "another owner"); err != nil {
				t.Error(err)
			}
			var err error
			if n, err = a.Acquire(ctx, "n"); err != nil {
				t.Error(err)
				return
			}
			if _, err := admin.Delete(ctx, heldKey(t, admin, prefix, "n")); err != nil {
				t.Error(err)
			}
		},
		holdOpen: func(int64) {
			if !restarting.Load() {
				return
			}
			openOnce.Do(func() {
				defer close(opened)
				ctx := context.Background()
				if _, err := admin.Delete(ctx, heldKey(t, admin, prefix, "y")); err != nil {
					t.Error(err)
				}
			})
		},
	}
	a = dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix), withHooks(hooks))
	x, y, z, w := acquireT(t, a, "x"), acquireT(t, a, "y"), acquireT(t, a, "z"), acquireT(t, a, "w")
	driverOf(a).restartHoldWatch()
	select {
	case <-opened:
	case <-time.After(slack.D(20 * time.Second)):
		t.Fatal("the hold watch did not open a new stream")
	}
	expectLost(t, x, 10*time.Second, "x, deleted before the read")
	expectLost(t, y, 10*time.Second, "y, deleted after the read")
	expectLost(t, z, 10*time.Second, "z, created again before the read")
	if n == nil {
		t.FailNow()
	}
	expectLost(t, n, 10*time.Second, "n, granted during the restart")
	releaseT(t, w)
	if n := driverOf(a).stats.holdWatch.Load(); n != 2 {
		t.Errorf("%d hold watch streams, want 2", n)
	}
	if n := driverOf(a).stats.holdReads.Load(); n != 2 {
		t.Errorf("%d reads of held keys, want 2 (the restart's, and the lock granted during it)", n)
	}
	if _, err := admin.Delete(context.Background(), heldKey(t, admin, prefix, "z")); err != nil {
		t.Error(err)
	}
}

// TestHoldWatchCompactedBetweenEvents: the revision the hold watch's new
// stream starts from is compacted, after a held key (y) was deleted at a
// later revision: the stream fails with ErrCompacted, the watch reads the
// held keys again and ends y's lease. Then a compaction between two
// events of a running stream changes nothing: a forced release after it
// still ends x's lease.
func TestHoldWatchCompactedBetweenEvents(t *testing.T) {
	t.Parallel()
	c := exclusiveCluster(t)
	admin := adminClient(t, c.Addrs()...)
	prefix := uniquePrefix(t)
	var restarting atomic.Bool
	compacted := make(chan struct{})
	compact := func() {
		resp, err := admin.Put(context.Background(), prefix+"-filler", "x")
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := admin.Compact(context.Background(), resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			t.Error(err)
		}
	}
	hooks := &testHooks{holdOpen: func(int64) {
		if !restarting.CompareAndSwap(true, false) {
			return
		}
		defer close(compacted)
		if _, err := admin.Delete(context.Background(), heldKey(t, admin, prefix, "y")); err != nil {
			t.Error(err)
		}
		compact()
	}}
	a := dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix), withHooks(hooks))
	b := dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix))
	x, y := acquireT(t, a, "x"), acquireT(t, a, "y")
	restarting.Store(true)
	driverOf(a).restartHoldWatch()
	select {
	case <-compacted:
	case <-time.After(slack.D(20 * time.Second)):
		t.Fatal("the hold watch did not open a new stream")
	}
	expectLost(t, y, 10*time.Second, "y, deleted at a compacted revision")
	if n := driverOf(a).stats.holdCompacted.Load(); n != 1 {
		t.Errorf("%d hold watch streams found their revision compacted, want 1", n)
	}
	mustAcquireRelease(t, b, "other") // an event on the running stream
	compact()
	if _, err := b.ForceRelease(ctxT(t, 10*time.Second), "x"); err != nil {
		t.Fatal(err)
	}
	expectLost(t, x, 10*time.Second, "x, force-released after a compaction")
}

// TestManyHeldOneForced: one Locker holds 2,000 locks (10,000 under make
// soak); a forced release of a random one ends exactly that lease (the
// others are still held: each Release finds its key), and holding them
// added O(1) goroutines.
func TestManyHeldOneForced(t *testing.T) {
	t.Parallel()
	c := exclusiveCluster(t)
	prefix := uniquePrefix(t)
	a := dialT(t, c.Addrs(), WithSessionTTL(10*time.Second), WithPrefix(prefix))
	b := dialT(t, c.Addrs(), WithSessionTTL(10*time.Second), WithPrefix(prefix))
	warm := acquireT(t, a, "warm")
	defer releaseT(t, warm)
	n := soak.Scale(2_000, 10_000)
	g0 := runtime.NumGoroutine()
	leases := make([]*distlock.Lease, n)
	ctx := ctxT(t, slack.D(5*time.Minute))
	each := func(f func(i int) error) {
		var (
			next atomic.Int64
			wg   sync.WaitGroup
		)
		for range 32 {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < n && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
					if err := f(i); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	each(func(i int) (err error) {
		leases[i], err = a.Acquire(ctx, fmt.Sprintf("k%d", i))
		return err
	})
	if t.Failed() {
		t.FailNow()
	}
	// The count is the process's: the package's parallel tests start
	// clusters and clients meanwhile (hundreds of goroutines), so the
	// bound tells O(1) from one goroutine per held lock (n), not 0 from 1.
	if added := runtime.NumGoroutine() - g0; added > n/4 {
		t.Errorf("holding %d locks added %d goroutines, want O(1), far below one per lock", n, added)
	}
	victim := rand.IntN(n)
	if _, err := b.ForceRelease(ctx, fmt.Sprintf("k%d", victim)); err != nil {
		t.Fatal(err)
	}
	expectLost(t, leases[victim], 20*time.Second, "the force-released lease")
	each(func(i int) error {
		if i == victim {
			return nil
		}
		if err := leases[i].Err(); err != nil {
			return fmt.Errorf("lease k%d ended: %w", i, err)
		}
		if err := leases[i].Release(ctx); err != nil {
			return fmt.Errorf("release k%d: %w", i, err)
		}
		return nil
	})
}

// TestManyLockersOneProcess: Lockers on one client, three on one prefix
// and one on another, each holding locks: a forced release ends only the
// lease it evicted, in the one Locker that held it; closing another Locker
// leaves the others' leases alone.
func TestManyLockersOneProcess(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	client := adminClient(t, c.Addrs()...)
	prefix, other := uniquePrefix(t), uniquePrefix(t)
	var ls []*distlock.Locker
	for i := range 4 {
		p := prefix
		if i == 3 {
			p = other
		}
		l, err := New(client, WithSessionTTL(testTTL), WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		ls = append(ls, l)
	}
	leases := make([][]*distlock.Lease, len(ls))
	for i, l := range ls {
		for j := range 10 {
			leases[i] = append(leases[i], acquireT(t, l, fmt.Sprintf("k%d", i*10+j)))
		}
	}
	same := acquireT(t, ls[3], "k15") // the name of one of ls[1]'s locks, on the other prefix
	if _, err := ls[0].ForceRelease(ctxT(t, 10*time.Second), "k15"); err != nil {
		t.Fatal(err)
	}
	expectLost(t, leases[1][5], 10*time.Second, "k15, force-released")
	if err := ls[2].Close(); err != nil {
		t.Fatal(err)
	}
	for i := range leases {
		for j, lease := range leases[i] {
			if i == 2 || i == 1 && j == 5 {
				continue
			}
			releaseT(t, lease)
		}
	}
	releaseT(t, same)
}

// TestCloseWhileHoldEventsInFlight: another client deletes every key of
// the Locker's 200 held locks in one request while the Locker closes:
// Close returns within its grace, every lease ends (lost, or closed), and
// the hold watch is over.
func TestCloseWhileHoldEventsInFlight(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	admin := adminClient(t, c.Addrs()...)
	prefix := uniquePrefix(t)
	a, err := Dial(c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	leases := make([]*distlock.Lease, 200)
	for i := range leases {
		leases[i] = acquireT(t, a, fmt.Sprintf("k%d", i))
	}
	deleted := make(chan error, 1)
	go func() {
		_, err := admin.Delete(context.Background(), prefix+"/", clientv3.WithPrefix())
		deleted <- err
	}()
	start := time.Now()
	if err := a.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if took := time.Since(start); took > slack.D(closeGrace+2*time.Second) {
		t.Errorf("Close took %v", took)
	}
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	for _, lease := range leases {
		select {
		case <-lease.Done():
		case <-time.After(slack.D(10 * time.Second)):
			t.Fatalf("lease %s did not end", lease.Key())
		}
	}
	driverOf(a).mu.Lock()
	running, held := driverOf(a).hw.running, driverOf(a).hw.held.len()
	driverOf(a).mu.Unlock()
	if running || held != 0 {
		t.Errorf("after Close: hold watch running %v with %d holds", running, held)
	}
}

// TestHoldGrantedWhileWatchStops: the release of a Locker's last held lock
// ends the hold watch's stream; a lock granted before the watch's
// goroutine has seen that end is watched all the same (the goroutine sets
// the watch up again instead of leaving): its key's deletion by another
// client ends its lease.
func TestHoldGrantedWhileWatchStops(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	admin := adminClient(t, c.Addrs()...)
	prefix := uniquePrefix(t)
	var (
		a     *distlock.Locker
		y     *distlock.Lease
		once  sync.Once
		armed atomic.Bool
	)
	granted, opened := make(chan struct{}), make(chan struct{}, 1)
	hooks := &testHooks{holdOpen: func(int64) {
		select {
		case opened <- struct{}{}:
		default:
		}
	}, holdEnded: func() {
		if !armed.Load() {
			return
		}
		once.Do(func() {
			defer close(granted)
			var err error
			if y, err = a.Acquire(context.Background(), "y"); err != nil {
				t.Error(err)
			}
		})
	}}
	a = dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix), withHooks(hooks))
	x := acquireT(t, a, "x")
	select {
	case <-opened:
	case <-time.After(slack.D(20 * time.Second)):
		t.Fatal("the hold watch did not open a stream")
	}
	armed.Store(true)
	releaseT(t, x) // the last hold: the stream ends, and y is granted
	select {
	case <-granted:
	case <-time.After(slack.D(20 * time.Second)):
		t.Fatal("the hold watch's stream did not end")
	}
	if y == nil {
		t.FailNow()
	}
	if _, err := admin.Delete(context.Background(), heldKey(t, admin, prefix, "y")); err != nil {
		t.Fatal(err)
	}
	expectLost(t, y, 10*time.Second, "y, granted while the watch stopped")
	if n := driverOf(a).stats.holdWatch.Load(); n != 2 {
		t.Errorf("%d hold watch streams, want 2", n)
	}
}
