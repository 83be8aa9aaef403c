package zookeeper

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
)

// inspectT is Locker.Inspect through l, failing the test on error.
func inspectT(t *testing.T, l *distlock.Locker, key string) distlock.LockInfo {
	t.Helper()
	info, err := l.Inspect(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	return info
}

// queue starts an Acquire of key on l that waits in line; the returned
// channel gets its lease (nil on error, which the waiter reported; read
// it with granted). It returns once the waiter's node is in the queue
// (its predecessor watch is set).
func queue(t *testing.T, l *distlock.Locker, key string, opts ...distlock.Option) <-chan *distlock.Lease {
	t.Helper()
	w0 := driverOf(l).stats.watches.Load()
	got := make(chan *distlock.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctxT(t, time.Minute), key, opts...)
		if err != nil {
			t.Errorf("queued Acquire: %v", err)
		}
		got <- lease
	}()
	waitFor(t, 10*time.Second, "waiter queued", func() bool { return driverOf(l).stats.watches.Load() > w0 })
	return got
}

// granted receives a queued waiter's lease, and ends the test if the
// waiter failed (it reported why).
func granted(t *testing.T, got <-chan *distlock.Lease) *distlock.Lease {
	t.Helper()
	lease := <-got
	if lease == nil {
		t.Fatal("the queued Acquire failed")
	}
	return lease
}

// TestInspect: another client sees the holder's owner, metadata, token,
// nested holds (published in the node's data) and the waiters; a nested
// hold keeps the first metadata; the node's data is readable JSON.
func TestInspect(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	base := uniqueBase(t)
	admin := adminConn(t, addrs...)
	holder, operator := dialT(t, addrs, WithBasePath(base)), dialT(t, addrs, WithBasePath(base))
	const key = "inspect"
	if info := inspectT(t, operator, key); info.Held || info.Waiters != 0 {
		t.Fatalf("Inspect of a key never locked = %+v", info)
	}
	lease, err := holder.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithOwner("job-7"), distlock.WithMetadata("host=a pid=1 ✓"))
	if err != nil {
		t.Fatal(err)
	}
	want := distlock.LockInfo{Key: key, Held: true, Owner: "job-7", Metadata: "host=a pid=1 ✓", Token: lease.Token(), Holds: 1, SessionBound: true}
	if info := inspectT(t, operator, key); info != want {
		t.Errorf("Inspect = %+v\nwant      %+v", info, want)
	}
	nodes := lockNodes(t, admin, base, key)
	data, _, err := admin.Get(base + "/" + encodeKey(key) + "/" + nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := string(data); got != `{"v":1,"owner":"job-7","metadata":"host=a pid=1 ✓","holds":1}` {
		t.Errorf("node data %s", got)
	}
	nested, err := holder.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithOwner("job-7"), distlock.WithMetadata("nested"))
	if err != nil {
		t.Fatal(err)
	}
	want.Holds = 2
	if info := inspectT(t, operator, key); info != want {
		t.Errorf("Inspect with a nested hold = %+v\nwant      %+v", info, want)
	}
	w1, w2 := dialT(t, addrs, WithBasePath(base)), dialT(t, addrs, WithBasePath(base))
	got1, got2 := queue(t, w1, key), queue(t, w2, key)
	want.Waiters = 2
	if info := inspectT(t, operator, key); info != want {
		t.Errorf("Inspect with two waiters = %+v\nwant      %+v", info, want)
	}
	if err := nested.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	want.Holds = 1
	if info := inspectT(t, operator, key); info != want {
		t.Errorf("Inspect after the nested Release = %+v\nwant      %+v", info, want)
	}
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	next := granted(t, got1)
	if info := inspectT(t, operator, key); !info.Held || info.Owner != next.Owner() || info.Waiters != 1 || info.Token != next.Token() {
		t.Errorf("Inspect after the hand-over = %+v, want the first waiter %q (token %d) and 1 waiter", info, next.Owner(), next.Token())
	}
	_ = next.Release(ctxT(t, 10*time.Second))
	last := granted(t, got2)
	_ = last.Release(ctxT(t, 10*time.Second))
}

// TestNestedHoldsWakeNoWaiter: publishing a nested hold count changes the
// holder's node data, which fires the next waiter's exists watch; the
// waiter watches again without listing the queue or counting a wake-up.
func TestNestedHoldsWakeNoWaiter(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	base := uniqueBase(t)
	holder, waiter := dialT(t, addrs, WithBasePath(base)), dialT(t, addrs, WithBasePath(base))
	const key = "nested-quiet"
	lease, err := holder.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithOwner("o"))
	if err != nil {
		t.Fatal(err)
	}
	got := queue(t, waiter, key)
	lists, events := driverOf(waiter).stats.children.Load(), driverOf(waiter).stats.watchEvents.Load()
	for range 3 {
		nested, err := holder.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithOwner("o"))
		if err != nil {
			t.Fatal(err)
		}
		if err := nested.Release(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	// A re-armed watch counts as a watch set (changes that land before
	// it coalesce into one event).
	waitFor(t, 10*time.Second, "the waiter's watch set again", func() bool { return driverOf(waiter).stats.watches.Load() >= 2 })
	time.Sleep(200 * time.Millisecond) // let any stray wake-up show
	if l, e := driverOf(waiter).stats.children.Load()-lists, driverOf(waiter).stats.watchEvents.Load()-events; l != 0 || e != 0 {
		t.Errorf("6 changes of the holder's hold count: the waiter listed the queue %d times and counted %d wake-ups, want 0 and 0", l, e)
	}
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if next := <-got; next != nil {
		_ = next.Release(ctxT(t, 10*time.Second))
	}
}

// TestForceRelease: an operator on another session evicts the holder; the
// queued waiter takes the lock with a higher token; the evicted lease ends
// at once (its node watch) and its Refresh and Release get ErrNotHeld.
func TestForceRelease(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	base := uniqueBase(t)
	admin := adminConn(t, addrs...)
	holder, operator, waiter := dialT(t, addrs, WithBasePath(base)), dialT(t, addrs, WithBasePath(base)), dialT(t, addrs, WithBasePath(base))
	const key = "force"
	if info, err := operator.ForceRelease(ctxT(t, 10*time.Second), key); err != nil || info.Held {
		t.Fatalf("ForceRelease of a free key = %+v, %v", info, err)
	}
	victim, err := holder.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithOwner("stuck"), distlock.WithMetadata("md"))
	if err != nil {
		t.Fatal(err)
	}
	nested, err := holder.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithOwner("stuck"))
	if err != nil {
		t.Fatal(err)
	}
	got := queue(t, waiter, key)
	info, err := operator.ForceRelease(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	want := distlock.LockInfo{Key: key, Held: true, Owner: "stuck", Metadata: "md", Token: victim.Token(), Holds: 2, SessionBound: true, Waiters: 1}
	if info != want {
		t.Errorf("ForceRelease = %+v\nwant           %+v", info, want)
	}
	next := granted(t, got)
	if next.Token() <= victim.Token() {
		t.Errorf("token after the forced release %d, evicted %d", next.Token(), victim.Token())
	}
	select {
	case <-victim.Done():
		if !errors.Is(victim.Err(), distlock.ErrLockLost) {
			t.Errorf("evicted lease ended with %v, want ErrLockLost", victim.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the evicted lease did not end within 10s of its node's deletion")
	}
	<-nested.Done()
	if err := victim.Refresh(ctxT(t, 10*time.Second), time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("evicted Refresh: %v", err)
	}
	for _, l := range []*distlock.Lease{nested, victim} {
		if err := l.Release(ctxT(t, 10*time.Second)); !errors.Is(err, distlock.ErrNotHeld) {
			t.Errorf("evicted Release: %v", err)
		}
	}
	if nodes := lockNodes(t, admin, base, key); len(nodes) != 1 {
		t.Errorf("nodes after the forced release %v, want the new holder's only", nodes)
	}
	if err := next.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Errorf("the new holder's Release: %v", err)
	}
}

// TestForceReleaseReportsWhatItDeletes: the holder changes between
// ForceRelease's read and its delete — its hold count, then the holder
// itself; the versioned delete fails and the report is of the holder
// actually deleted.
func TestForceReleaseReportsWhatItDeletes(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	base := uniqueBase(t)
	holder, other := dialT(t, addrs, WithBasePath(base)), dialT(t, addrs, WithBasePath(base))
	const key = "force-race"
	var (
		mu     sync.Mutex
		calls  int
		paths  []string
		leases []*distlock.Lease
	)
	hooks := &testHooks{beforeForceDelete: func(path string) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		paths = append(paths, path)
		ctx := ctxT(t, 10*time.Second)
		switch calls {
		case 1: // the hold count changes: same node, new data version
			l, err := holder.TryAcquire(ctx, key, distlock.WithOwner("first"))
			if err != nil {
				t.Errorf("nest: %v", err)
				return
			}
			leases = append(leases, l)
		case 2: // the holder changes: released, another owner takes it
			for _, l := range leases {
				_ = l.Release(ctx)
			}
			leases = leases[:0]
			l, err := other.TryAcquire(ctx, key, distlock.WithOwner("second"), distlock.WithMetadata("2nd"))
			if err != nil {
				t.Errorf("second owner: %v", err)
				return
			}
			leases = append(leases, l)
		}
	}}
	operator := dialT(t, addrs, WithBasePath(base), withHooks(hooks))
	first, err := holder.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithOwner("first"), distlock.WithMetadata("1st"))
	if err != nil {
		t.Fatal(err)
	}
	leases = append(leases, first)
	info, err := operator.ForceRelease(ctxT(t, 30*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 1 {
		t.Fatal("the second owner's acquisition in the hook failed")
	}
	second := leases[0]
	want := distlock.LockInfo{Key: key, Held: true, Owner: "second", Metadata: "2nd", Token: second.Token(), Holds: 1, SessionBound: true}
	if info != want {
		t.Errorf("ForceRelease = %+v\nwant           %+v", info, want)
	}
	if calls != 3 || paths[0] != paths[1] || paths[1] == paths[2] {
		t.Errorf("%d reads of the holder (%v), want 3: the first node twice, then the second owner's", calls, paths)
	}
	if err := second.Release(ctxT(t, 10*time.Second)); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("the evicted second owner's Release: %v", err)
	}
	if info := inspectT(t, operator, key); info.Held {
		t.Errorf("Inspect after ForceRelease = %+v", info)
	}
}

// TestNodeDataLegacy: a node written by an earlier version (the bare owner
// id) reads as that owner with one hold; the JSON form round-trips.
func TestNodeDataLegacy(t *testing.T) {
	if nd := decodeNode([]byte("owner-1")); nd.Owner != "owner-1" || nd.Holds != 1 || nd.Metadata != "" {
		t.Errorf("legacy data: %+v", nd)
	}
	if nd := decodeNode([]byte(`{"v":2,"owner":"x","holds":3}`)); nd.Owner != `{"v":2,"owner":"x","holds":3}` || nd.Holds != 1 {
		t.Errorf("unknown version: %+v", nd)
	}
	if nd := decodeNode(encodeNode("o", "m \" ✓", 5)); nd.Owner != "o" || nd.Metadata != "m \" ✓" || nd.Holds != 5 {
		t.Errorf("round trip: %+v", nd)
	}
}

// TestDistinctKeysLeaveNoParents measures the per-key parents left after
// many distinct keys were locked and released: they are container nodes,
// which the server's reaper deletes once empty.
func TestDistinctKeysLeaveNoParents(t *testing.T) {
	conformance.Parallel(t)
	needControl(t) // the reaper interval is the test servers' (containerCheckMs)
	s := standalone(t)
	addrs := []string{s.Addr()}
	base := uniqueBase(t)
	admin := adminConn(t, addrs...)
	l := dialT(t, addrs, WithBasePath(base))
	const n = 200
	for i := range n {
		lease, err := l.TryAcquire(ctxT(t, 10*time.Second), fmt.Sprintf("distinct-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		children, _, err := admin.Children(base)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Fatal(err)
		}
		return len(children)
	}
	right := count()
	start := time.Now()
	waitFor(t, 30*time.Second, "every empty parent reaped", func() bool { return count() == 0 })
	t.Logf("%d distinct keys: %d parents right after, 0 after %v (reaper interval %dms)", n, right, time.Since(start).Round(time.Millisecond), containerCheckMs)
}
