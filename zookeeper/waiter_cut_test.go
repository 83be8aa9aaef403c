package zookeeper

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestWaiterKeepsPlaceAcrossCut: the connection of a waiter that has just
// joined the queue drops while the read of its own node (the one sent
// right after the create) is pending, for much less than the session
// timeout. The session lives, so the waiter keeps its node and its place:
// it acquires before a waiter that joined after the cut, and without an
// error.
func TestWaiterKeepsPlaceAcrossCut(t *testing.T) {
	conformance.Parallel(t)
	needControl(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	admin := adminConn(t, addrs...)
	base, fb := uniqueBase(t), &faults{}
	const session, outage = 10 * time.Second, 300 * time.Millisecond
	a := dialT(t, addrs, WithSessionTimeout(session), WithBasePath(base))
	b := dialT(t, addrs, WithSessionTimeout(session), WithDialer(fb.dial), WithBasePath(base), withHooks(&testHooks{sessionLost: func(id int64, cause string) { t.Logf("LOST 0x%x %s", id, cause) }}))
	c := dialT(t, addrs, WithSessionTimeout(session), WithBasePath(base))
	warm(t, b)
	sidB, createsB := sessionOf(b).ID(), driverOf(b).stats.creates.Load()
	const key = "waiter-cut"
	held, err := a.Acquire(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}

	type res struct {
		lease *distlock.Lease
		err   error
	}
	acquire := func(l *distlock.Locker) <-chan res {
		got := make(chan res, 1)
		go func() {
			lease, err := l.Acquire(ctxT(t, slack.D(60*time.Second)), key, distlock.WithRetryUnavailable(true))
			got <- res{lease, err}
		}()
		return got
	}
	fb.armCutRead(outage)
	gotB := acquire(b)
	waitFor(t, slack.D(20*time.Second), "B's read of its node cut", func() bool { return fb.cutCount() == 1 })
	waitFor(t, slack.D(20*time.Second), "B watching its predecessor", func() bool { return driverOf(b).stats.watches.Load() >= 1 })
	nodes := lockNodes(t, admin, base, key)
	if len(nodes) != 2 {
		t.Fatalf("queue after the cut: %v, want A's node and B's", nodes)
	}
	nodeB := nodes[1]
	gotC := acquire(c)
	waitFor(t, slack.D(20*time.Second), "C queued", func() bool { return driverOf(c).stats.watches.Load() >= 1 })

	if err := held.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	var rb res
	select {
	case rb = <-gotB:
	case rc := <-gotC:
		t.Fatalf("C, queued after B, acquired first (%v): B lost its place", rc.err)
	}
	if rb.err != nil {
		t.Fatalf("B after a %v cut within its %v session: %v", outage, session, rb.err)
	}
	if sessionOf(b).ID() != sidB {
		t.Fatalf("B's session changed (0x%x to 0x%x): the cut was not shorter than the session", sidB, sessionOf(b).ID())
	}
	if got := lockNodes(t, admin, base, key); len(got) == 0 || got[0] != nodeB {
		t.Errorf("B holds through %v, want its node from before the cut %s", got, nodeB)
	}
	if n := driverOf(b).stats.creates.Load() - createsB; n != 1 {
		t.Errorf("B created %d nodes, want 1: it rejoined the queue", n)
	}
	if err := rb.lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	rc := <-gotC
	if rc.err != nil {
		t.Fatalf("C: %v", rc.err)
	}
	if err := rc.lease.Release(ctxT(t, 10*time.Second)); err != nil && !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatal(err)
	}
}

// TestHoldWatchSurvivesCut: a nested acquisition rewrites the hold's node
// (its hold count), which fires the hold's watch; the connection drops
// while the read that sets the watch again is pending. The session lives,
// so the watch must too: a ForceRelease by another client afterwards ends
// the lease at once, not at its next refresh.
func TestHoldWatchSurvivesCut(t *testing.T) {
	conformance.Parallel(t)
	needControl(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	base, fa := uniqueBase(t), &faults{}
	const session, outage = 10 * time.Second, 300 * time.Millisecond
	a := dialT(t, addrs, WithSessionTimeout(session), WithDialer(fa.dial), WithBasePath(base))
	op := dialT(t, addrs, WithSessionTimeout(session), WithBasePath(base))
	warm(t, a)
	sid := sessionOf(a).ID()
	const key = "hold-watch-cut"
	// A TTL far beyond the test: no refresh comes to notice the loss.
	opts := []distlock.Option{distlock.WithOwner("o"), distlock.WithTTL(10 * time.Minute)}
	outer, err := a.Acquire(ctxT(t, 10*time.Second), key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	fa.armCutRead(outage)
	inner, err := a.Acquire(ctxT(t, 10*time.Second), key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, slack.D(20*time.Second), "the watch's read cut", func() bool { return fa.cutCount() == 1 })
	waitFor(t, slack.D(20*time.Second), "A reconnected", func() bool { return driverOf(a).connState() == fmt.Sprintf("%v session 0x%x", zk.StateHasSession, sid) })
	if sessionOf(a).ID() != sid {
		t.Fatalf("A's session changed: the cut was not shorter than the session")
	}
	if _, err := op.ForceRelease(ctxT(t, 10*time.Second), key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-outer.Done():
	case <-time.After(slack.D(5 * time.Second)):
		t.Fatalf("the lease still looks held %v after ForceRelease: its watch was lost with the connection", slack.D(5*time.Second))
	}
	if err := outer.Err(); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("lease ended with %v, want ErrLockLost", err)
	}
	<-inner.Done()
}

// TestIdleSessionSyncSurvivesCut: the Sync that renews an idle session's
// contact before an acquisition uses it is cut off with the connection,
// for much less than the session timeout: the acquisition goes on in the
// same session, without an error.
func TestIdleSessionSyncSurvivesCut(t *testing.T) {
	conformance.Parallel(t)
	needControl(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	base, fa := uniqueBase(t), &faults{}
	// Re-dials are refused for less than the cut takes (150ms), so the
	// client reconnects at once rather than after go-zookeeper's 1s pause
	// once every server was tried: the session keeps a wide margin over
	// its local deadline even on a loaded machine.
	const session, outage = 4 * time.Second, 100 * time.Millisecond
	a := dialT(t, addrs, WithSessionTimeout(session), WithDialer(fa.dial), WithBasePath(base))
	warm(t, a)
	sid := sessionOf(a).ID()
	// Idle for two heartbeat periods (timeout/10 each): the next use
	// renews contact with a Sync first.
	time.Sleep(2*session/10 + 50*time.Millisecond)
	fa.armCutSync(outage)
	lease, err := a.Acquire(ctxT(t, 10*time.Second), "idle-sync-cut")
	if err != nil {
		t.Fatalf("Acquire after its Sync was cut (%d cuts): %v", fa.cutCount(), err)
	}
	if fa.cutCount() != 1 {
		t.Fatalf("%d cuts, want the Sync cut", fa.cutCount())
	}
	if sessionOf(a).ID() != sid {
		t.Errorf("session changed: the cut was not shorter than the session")
	}
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}
