package zookeeper

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/queuewait/queuewaittest"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// watchedPaths returns the paths the server has a watch on ("wchp").
func watchedPaths(t testing.TB, addr string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	answer, err := fourLetterWord(addr, "wchp")
	if err != nil {
		t.Fatalf("wchp: %v", err)
	}
	for _, line := range strings.Split(answer, "\n") {
		if strings.HasPrefix(line, "/") {
			out[strings.TrimSpace(line)] = true
		}
	}
	return out
}

// TestWaiterLeavesNoWatchOnGonePredecessor: a waiter whose predecessor is
// gone by the time it watches it (here: the predecessor's data changes and
// it is deleted in one transaction, so the waiter's re-watch after the data
// event finds it gone) must not leave a watch behind on that path: a
// sequential name is never created again, so such a watch would stay on
// the server and in the client for the session's whole life, one per wait.
func TestWaiterLeavesNoWatchOnGonePredecessor(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	base := uniqueBase(t)
	holder := dialT(t, []string{s.Addr()}, WithBasePath(base))
	waiter := dialT(t, []string{s.Addr()}, WithBasePath(base))
	admin := adminConn(t, s.Addr())

	h, err := holder.Acquire(ctxT(t, 30*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Release(ctxT(t, 10*time.Second)) }()
	w0 := driverOf(waiter).stats.watches.Load()
	done := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctxT(t, 30*time.Second), "k")
		if err == nil {
			err = l.Release(ctxT(t, 10*time.Second))
		}
		done <- err
	}()
	waitFor(t, 20*time.Second, "waiter watching its predecessor", func() bool { return driverOf(waiter).stats.watches.Load() > w0 })

	nodes := lockNodes(t, admin, base, "k")
	if len(nodes) != 2 {
		t.Fatalf("queue %v, want the holder's node and the waiter's", nodes)
	}
	pred := base + "/" + encodeKey("k") + "/" + nodes[0]
	data, _, err := admin.Get(pred)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Multi(&zk.SetDataRequest{Path: pred, Data: data, Version: -1}, &zk.DeleteRequest{Path: pred, Version: -1}); err != nil {
		t.Fatalf("multi set+delete: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("waiter was not granted once its predecessor was deleted")
	}
	if w := watchedPaths(t, s.Addr()); w[pred] {
		t.Errorf("a watch is left on the deleted predecessor %s (wchp)", pred)
	}
}

// TestWaiterCancelledWhileCutOffReturnsPromptly: a queued waiter cancelled
// while its server does not answer returns promptly (the delete of its
// node must not hold the caller) and its node goes once the server answers
// (queuewaittest.CancelledWhileCutOff).
func TestWaiterCancelledWhileCutOffReturnsPromptly(t *testing.T) {
	conformance.Parallel(t)
	needControl(t)
	s := standalone(t)
	base, fw := uniqueBase(t), &faults{}
	holder := dialT(t, []string{s.Addr()}, WithBasePath(base))
	waiter := dialT(t, []string{s.Addr()}, WithBasePath(base), WithDialer(fw.dial), WithSessionTimeout(20*time.Second))
	admin := adminConn(t, s.Addr())
	warm(t, waiter)
	// The blackhole swallows the requests sent meanwhile on a connection
	// that lives on: the heal resets it, as the end of a real partition
	// would, so that they are sent again.
	cut := func(on bool) {
		fw.setBlackhole(on)
		if !on {
			fw.cutNow(0)
		}
	}
	queuewaittest.CancelledWhileCutOff(t, holder, waiter, driverOf(waiter).stats.watches.Load, cut,
		func(t *testing.T) int { return len(lockNodes(t, admin, base, "k")) })
}

// TestMixedOwnersAllGranted: waiters of three owners on one Locker,
// joining each other's holds out of the queue (queuewaittest).
func TestMixedOwnersAllGranted(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	base := uniqueBase(t)
	admin := adminConn(t, s.Addr())
	queuewaittest.MixedOwnersAllGranted(t, 60, 3,
		func(t *testing.T) *distlock.Locker {
			return dialT(t, []string{s.Addr()}, WithBasePath(base), WithSessionTimeout(20*time.Second))
		},
		func(t *testing.T) int { return len(lockNodes(t, admin, base, "k")) })
}

// TestTwoHundredWaitersInOrder: 200 waiters queued on one key are all
// granted, in queue order (their tokens rise), and each release wakes one
// waiter: the queue's reads and watch events grow with the waiters, not
// with their square (a herd).
func TestTwoHundredWaitersInOrder(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	base := uniqueBase(t)
	const n = 200
	admin := adminConn(t, s.Addr())
	holder := dialT(t, []string{s.Addr()}, WithBasePath(base))
	w := dialT(t, []string{s.Addr()}, WithBasePath(base), WithSessionTimeout(20*time.Second))
	warm(t, w)
	lease, err := holder.Acquire(ctxT(t, 30*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, slack.D(3*time.Minute))
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
	waitFor(t, slack.D(time.Minute), "every waiter queued", func() bool { return len(lockNodes(t, admin, base, "k")) == n+1 })
	d := driverOf(w)
	waitFor(t, slack.D(time.Minute), "every waiter watching", func() bool { return d.stats.watches.Load() >= n })
	lists, events := d.stats.children.Load(), d.stats.watchEvents.Load()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(tokens) != n {
		t.Fatalf("%d of %d waiters granted", len(tokens), n)
	}
	for i := 1; i < n; i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("grant %d has token %d after %d: not in queue order", i, tokens[i], tokens[i-1])
		}
	}
	dl, de := d.stats.children.Load()-lists, d.stats.watchEvents.Load()-events
	t.Logf("%d releases: %d queue reads, %d watch events", n, dl, de)
	if de > n || dl > 2*n {
		t.Errorf("%d releases woke waiters %d times and read the queue %d times, want at most %d and %d (herd)", n, de, dl, n, 2*n)
	}
	if left := lockNodes(t, admin, base, "k"); len(left) != 0 {
		t.Errorf("nodes left: %v", left)
	}
}
