package zookeeper

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestCutAfterCreate reproduces go-zookeeper's orphan (samuel/go-zookeeper
// #229: the connection drops right after a create was sent, for less than
// the session timeout) with its zk.Lock, and shows that distlock adopts or
// deletes the node instead.
func TestCutAfterCreate(t *testing.T) {
	conformance.Parallel(t)
	needControl(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	admin := adminConn(t, addrs...)
	t.Run("zk.Lock leaves an orphan", func(t *testing.T) { cutZkLockOrphan(t, addrs, admin) })
	t.Run("distlock adopts its node", func(t *testing.T) { cutAdopts(t, addrs, admin) })
	t.Run("distlock deletes the node of an attempt that gave up", func(t *testing.T) { cutGivesUp(t, addrs, admin) })
	t.Run("TryAcquire after a cut", func(t *testing.T) { cutTryAcquire(t, addrs, admin) })
}

// The session timeout and outage of TestCutAfterCreate: the outage is
// shorter than the session timeout, so the session survives it.
const (
	cutSession = 6 * time.Second
	cutOutage  = 2 * time.Second
)

// cutLockers dials, on a base path of its own, A with fault injection (its
// session established) and others more Lockers.
func cutLockers(t *testing.T, addrs []string, others int) (base string, fa *faults, a *distlock.Locker, rest []*distlock.Locker) {
	base, fa = uniqueBase(t), &faults{}
	a = dialT(t, addrs, WithSessionTimeout(cutSession), WithDialer(fa.dial), WithBasePath(base))
	for range others {
		rest = append(rest, dialT(t, addrs, WithSessionTimeout(cutSession), WithBasePath(base)))
	}
	warm(t, a)
	return base, fa, a, rest
}

func cutZkLockOrphan(t *testing.T, addrs []string, admin *zk.Conn) {
	const session, outage = cutSession, cutOutage
	path := uniqueBase(t)
	if _, err := admin.Create(path[:strings.LastIndexByte(path, '/')], nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	if _, err := admin.Create(path, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	fa := &faults{}
	connA, _, err := zk.Connect(addrs, session, zk.WithDialer(fa.dial), zk.WithLogger(DiscardLogger), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer connA.Close()
	waitFor(t, 10*time.Second, "A's session", func() bool { return connA.State() == zk.StateHasSession })
	sidA := connA.SessionID()
	fa.armCut(outage)
	errA := zk.NewLock(connA, path, zk.WorldACL(zk.PermAll)).Lock()
	if errA == nil {
		t.Skip("zk.Lock found its node this time (the outage ended before its lookup): nothing reproduced")
	}
	t.Logf("zk.Lock returned %v after the cut", errA)
	waitFor(t, 3*session, "A's reconnect", func() bool { return connA.State() == zk.StateHasSession })
	if connA.SessionID() != sidA {
		t.Fatalf("A's session changed: the outage was not shorter than the session timeout")
	}
	children, _, err := admin.Children(path)
	if err != nil || len(children) != 1 {
		t.Fatalf("children after the failed Lock: %v %v", children, err)
	}
	_, st, err := admin.Get(path + "/" + children[0])
	if err != nil || st.EphemeralOwner != sidA {
		t.Fatalf("node %s: %v, owner 0x%x, want A's live session 0x%x", children[0], err, st.EphemeralOwner, sidA)
	}
	connB, _, err := zk.Connect(addrs, session, zk.WithLogger(DiscardLogger), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer connB.Close()
	got := make(chan error, 1)
	go func() { got <- zk.NewLock(connB, path, zk.WorldACL(zk.PermAll)).Lock() }()
	select {
	case err := <-got:
		t.Fatalf("B's zk.Lock returned (%v) while A's orphan exists", err)
	case <-time.After(session + 2*time.Second):
		t.Logf("reproduced: B blocked for %v behind orphan %s of A's live session, which nobody holds", session+2*time.Second, children[0])
	}
	connA.Close() // only the end of A's session frees B
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("B: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("B still blocked after A's session closed")
	}
}

func cutAdopts(t *testing.T, addrs []string, admin *zk.Conn) {
	const outage = cutOutage
	base, fa, a, others := cutLockers(t, addrs, 1)
	b := others[0]
	sidA := sessionOf(a).ID()
	const key = "cut/adopt"
	held, err := b.TryAcquire(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	fa.armCut(outage)
	type res struct {
		lease *distlock.Lease
		err   error
	}
	got := make(chan res, 1)
	go func() {
		lease, err := a.Acquire(ctxT(t, 60*time.Second), key)
		got <- res{lease, err}
	}()
	waitFor(t, 30*time.Second, "A to wait behind B after the cut", func() bool {
		return fa.cutCount() == 1 && driverOf(a).stats.watches.Load() >= 1
	})
	nodes := lockNodes(t, admin, base, key)
	if len(nodes) != 2 {
		t.Fatalf("nodes after the cut: %v, want B's and A's (adopted) only", nodes)
	}
	_, st, err := admin.Get(base + "/" + encodeKey(key) + "/" + nodes[1])
	if err != nil || st.EphemeralOwner != sidA || sessionOf(a).ID() != sidA {
		t.Fatalf("A's node: owner 0x%x (%v), A's session 0x%x then 0x%x", st.EphemeralOwner, err, sidA, sessionOf(a).ID())
	}
	if err := held.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("A's Acquire after the cut: %v", r.err)
	}
	if r.lease.Token() <= held.Token() {
		t.Errorf("token %d after B's %d", r.lease.Token(), held.Token())
	}
	if err := r.lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := lockNodes(t, admin, base, key); len(n) != 0 {
		t.Errorf("left behind: %v", n)
	}
}

func cutGivesUp(t *testing.T, addrs []string, admin *zk.Conn) {
	const session, outage = cutSession, cutOutage
	base, fa, a, others := cutLockers(t, addrs, 2)
	b, c := others[0], others[1]
	sidA := sessionOf(a).ID()
	const key = "cut/give-up"
	held, err := b.TryAcquire(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	fa.armCut(outage)
	ctx, cancel := context.WithTimeout(context.Background(), outage/2)
	defer cancel()
	_, err = a.Acquire(ctx, key)
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("A's Acquire during the outage = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if fa.cutCount() != 1 {
		t.Fatalf("the cut did not happen")
	}
	// A's session survives the outage, and its orphan is deleted by
	// A's background cleanup, not by a session expiry.
	waitFor(t, 3*session, "A's orphan deleted", func() bool { return len(lockNodes(t, admin, base, key)) == 1 })
	if sessionOf(a).ID() != sidA || driverOf(a).stats.sessions.Load() != 0 {
		t.Fatalf("A's session changed (0x%x → 0x%x): the test wants the cleanup, not the expiry", sidA, sessionOf(a).ID())
	}
	if err := held.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	lease, err := c.Acquire(ctxT(t, 5*time.Second), key)
	if err != nil {
		t.Fatalf("C blocked after B released: %v (nodes %v)", err, lockNodes(t, admin, base, key))
	}
	t.Logf("C acquired %v after B's release", time.Since(start).Round(time.Millisecond))
	_ = lease.Release(ctxT(t, 10*time.Second))
}

func cutTryAcquire(t *testing.T, addrs []string, admin *zk.Conn) {
	const outage = cutOutage
	base, fa, a, others := cutLockers(t, addrs, 1)
	b := others[0]
	// The parent exists: the cut create succeeds on the server.
	other, err := b.TryAcquire(ctxT(t, 10*time.Second), "cut/try/other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(context.Background())
	const key = "cut/try"
	lock0, err := b.TryAcquire(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock0.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	fa.armCut(outage)
	lease, err := a.TryAcquire(ctxT(t, 30*time.Second), key)
	if err != nil {
		t.Fatalf("TryAcquire across a cut: %v", err)
	}
	if fa.cutCount() != 1 {
		t.Fatalf("the cut did not happen")
	}
	if n := lockNodes(t, admin, base, key); len(n) != 1 {
		t.Fatalf("nodes: %v, want exactly the adopted one", n)
	}
	if _, err := b.TryAcquire(ctxT(t, 10*time.Second), key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("B: %v, want busy", err)
	}
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestPartitionExpiry: a holder cut off from the ensemble for longer than
// the session timeout ends its lease at last contact + session timeout −
// margin, before the server expires the session and another client gets
// the lock; afterwards the Locker works again on a new session.
func TestPartitionExpiry(t *testing.T) {
	conformance.Parallel(t)
	needControl(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	base := uniqueBase(t)
	const session = 4 * time.Second
	fa := &faults{}
	a := dialT(t, addrs, WithSessionTimeout(session), WithDialer(fa.dial), WithBasePath(base))
	b := dialT(t, addrs, WithSessionTimeout(session), WithBasePath(base))
	const key = "partition"
	lease, err := a.Acquire(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	sid := sessionOf(a).ID()
	if got := sessionOf(a).Timeout(); got != session {
		t.Fatalf("negotiated timeout %v, want %v", got, session)
	}
	type res struct {
		lease *distlock.Lease
		err   error
		at    time.Time
	}
	got := make(chan res, 1)
	go func() {
		l, err := b.Acquire(ctxT(t, 60*time.Second), key)
		got <- res{l, err, time.Now()}
	}()
	waitFor(t, 10*time.Second, "B waiting", func() bool { return driverOf(b).stats.watches.Load() >= 1 })

	sess := driverOf(a).current()
	partition := time.Now()
	fa.setBlackhole(true)
	driverOf(a).mu.Lock()
	lastContact := sess.lastContactLocked()
	driverOf(a).mu.Unlock()
	var doneAt time.Time
	select {
	case <-lease.Done():
		doneAt = time.Now()
	case <-time.After(3 * session):
		t.Fatalf("lease still held %v into the partition", 3*session)
	}
	driverOf(a).mu.Lock()
	deadline := sess.deadlineLocked() // last contact may have moved just before the partition
	driverOf(a).mu.Unlock()
	r := <-got
	if r.err != nil {
		t.Fatalf("B: %v", r.err)
	}
	t.Logf("partition at +0; A's last contact %v before it; A's Done at +%v (local deadline +%v, timeout %v, margin %v); B acquired at +%v: %v after A learned of the loss",
		partition.Sub(lastContact).Round(time.Millisecond), doneAt.Sub(partition).Round(time.Millisecond),
		deadline.Sub(partition).Round(time.Millisecond), session, sess.margin,
		r.at.Sub(partition).Round(time.Millisecond), r.at.Sub(doneAt).Round(time.Millisecond))
	if !doneAt.Before(r.at) {
		t.Errorf("A learned of the loss %v after B acquired", doneAt.Sub(r.at))
	}
	if late := doneAt.Sub(deadline); late < 0 || late > time.Second {
		t.Errorf("A's Done %v after its local deadline, want within [0, 1s]", late)
	}
	if err := lease.Err(); !errors.Is(err, distlock.ErrLockLost) || !strings.Contains(err.Error(), "session") {
		t.Errorf("A's lease ended with %v, want ErrLockLost naming the session", err)
	}
	if err := lease.Release(ctxT(t, 5*time.Second)); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("A's Release after the loss = %v, want ErrNotHeld", err)
	}
	if err := r.lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Heal: the Locker works again, on a new session.
	fa.setBlackhole(false)
	again, err := a.Acquire(ctxT(t, 30*time.Second), key)
	if err != nil {
		t.Fatalf("A after the partition: %v", err)
	}
	if sessionOf(a).ID() == sid || sessionOf(a).ID() == 0 {
		t.Errorf("A's session 0x%x after the partition, want a new one (was 0x%x)", sessionOf(a).ID(), sid)
	}
	if err := again.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestShortOutageKeepsLease: a disconnect shorter than the local deadline
// keeps the lease (default policy); LoseOnDisconnect (Curator's standard
// policy) ends it at once, and its node is deleted without waiting for the
// session to expire.
func TestShortOutageKeepsLease(t *testing.T) {
	conformance.Parallel(t)
	needControl(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	base := uniqueBase(t)
	const session = 6 * time.Second
	b := dialT(t, addrs, WithSessionTimeout(session), WithBasePath(base))
	for _, policy := range []LossPolicy{LoseOnSessionTimeout, LoseOnDisconnect} {
		t.Run(policy.String(), func(t *testing.T) {
			fa := &faults{}
			a := dialT(t, addrs, WithSessionTimeout(session), WithDialer(fa.dial), WithBasePath(base), WithLossPolicy(policy))
			key := "outage/" + policy.String()
			lease, err := a.TryAcquire(ctxT(t, 10*time.Second), key)
			if err != nil {
				t.Fatal(err)
			}
			sid := sessionOf(a).ID()
			start := time.Now()
			fa.cutNow(500 * time.Millisecond)
			if policy == LoseOnDisconnect {
				select {
				case <-lease.Done():
					t.Logf("lease lost %v after the cut", time.Since(start).Round(time.Millisecond))
				case <-time.After(session / 2):
					t.Fatalf("lease still held %v after the cut", session/2)
				}
				// The old connection is closed as soon as it is back,
				// which ends the session and deletes the node: B need
				// not wait for the session to expire.
				other, err := b.Acquire(ctxT(t, session-time.Second), key)
				if err != nil {
					t.Fatalf("B: %v (after %v; A's state %v, session 0x%x; nodes %v)", err, time.Since(start), driverOf(a).connState(), sid, lockNodes(t, adminConn(t, addrs...), base, key))
				}
				t.Logf("B acquired %v after the cut (session timeout %v)", time.Since(start).Round(time.Millisecond), session)
				_ = other.Release(ctxT(t, 10*time.Second))
				again, err := a.Acquire(ctxT(t, 30*time.Second), key)
				if err != nil {
					t.Fatalf("A after the cut: %v", err)
				}
				if sessionOf(a).ID() == sid {
					t.Errorf("same session after LoseOnDisconnect")
				}
				_ = again.Release(ctxT(t, 10*time.Second))
				return
			}
			// Reconnected (after ~1–2s) in the same session.
			waitFor(t, session, "A back in touch with the ensemble", func() bool { return lease.Err() != nil || contactSince(a, start) })
			if err := lease.Err(); err != nil {
				t.Fatalf("lease lost across a short outage: %v", err)
			}
			if sessionOf(a).ID() != sid {
				t.Fatalf("session changed")
			}
			if _, err := b.TryAcquire(ctxT(t, 10*time.Second), key); !errors.Is(err, distlock.ErrNotAcquired) {
				t.Fatalf("B: %v, want busy", err)
			}
			if err := lease.Refresh(ctxT(t, 10*time.Second), time.Second); err != nil {
				t.Fatalf("Refresh: %v", err)
			}
			if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestServerPause: SIGSTOP of the standalone server, and of the ensemble's
// leader, for less than the session timeout keeps the lease.
func TestServerPause(t *testing.T) {
	needControl(t)
	t.Run("standalone", func(t *testing.T) {
		s := standalone(t)
		const session = 4 * time.Second
		base := uniqueBase(t)
		a := dialT(t, []string{s.Addr()}, WithSessionTimeout(session), WithBasePath(base))
		b := dialT(t, []string{s.Addr()}, WithSessionTimeout(session), WithBasePath(base))
		pauseHolder(t, a, b, session/2, func() (func(), error) {
			if err := s.Pause(); err != nil {
				return nil, err
			}
			return func() { _ = s.Resume() }, nil
		})
	})
	t.Run("ensemble leader", func(t *testing.T) {
		c := ensemble(t)
		const session = 10 * time.Second
		base := uniqueBase(t)
		a := dialT(t, c.Addrs(), WithSessionTimeout(session), WithBasePath(base))
		b := dialT(t, c.Addrs(), WithSessionTimeout(session), WithBasePath(base))
		// Longer than syncLimit (3s here): the followers elect a new
		// leader meanwhile.
		pauseHolder(t, a, b, 4*time.Second, func() (func(), error) {
			s, err := leaderOf(c)
			if err != nil {
				return nil, err
			}
			if err := s.Pause(); err != nil {
				return nil, err
			}
			return func() {
				_ = s.Resume()
				if err := c.WaitReady(ctxT(t, time.Minute)); err != nil {
					t.Errorf("ensemble after the pause: %v", err)
				}
			}, nil
		})
	})
}

func pauseHolder(t *testing.T, a, b *distlock.Locker, pause time.Duration, stop func() (resume func(), err error)) {
	t.Helper()
	const key = "pause"
	lease, err := a.TryAcquire(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	sid := sessionOf(a).ID()
	resume, err := stop()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	resume()
	resumed := time.Now()
	// Let the clients reconnect and the heartbeat run.
	waitFor(t, sessionOf(a).Timeout(), "A back in touch with the ensemble", func() bool { return lease.Err() != nil || contactSince(a, resumed) })
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost across a %v pause (session timeout %v): %v", pause, sessionOf(a).Timeout(), err)
	}
	if sessionOf(a).ID() != sid {
		t.Fatalf("session changed")
	}
	var busy error
	for i := 0; i < 50; i++ { // b may be reconnecting
		if _, busy = b.TryAcquire(ctxT(t, 10*time.Second), key); !errors.Is(busy, distlock.ErrUnavailable) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !errors.Is(busy, distlock.ErrNotAcquired) {
		t.Fatalf("B after the pause: %v, want busy", busy)
	}
	if err := lease.Release(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	other, err := b.Acquire(ctxT(t, 20*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	_ = other.Release(ctxT(t, 10*time.Second))
}

// TestHerd: with 10 waiters, each release wakes exactly one of them (one
// watch fired, one getChildren), in arrival order.
func TestHerd(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	base := uniqueBase(t)
	const n = 10
	const key = "herd"
	holder := dialT(t, addrs, WithBasePath(base))
	first, err := holder.TryAcquire(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	waiters := make([]*distlock.Locker, n)
	got := make([]chan *distlock.Lease, n)
	for i := range waiters {
		waiters[i] = dialT(t, addrs, WithBasePath(base))
		got[i] = make(chan *distlock.Lease, 1)
		go func() {
			lease, err := waiters[i].Acquire(ctxT(t, 2*time.Minute), key)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				close(got[i])
				return
			}
			got[i] <- lease
		}()
		waitFor(t, 10*time.Second, "waiter queued", func() bool { return driverOf(waiters[i]).stats.watches.Load() == 1 })
	}
	total := func() (events, lists int64) {
		for _, w := range waiters {
			events += driverOf(w).stats.watchEvents.Load()
			lists += driverOf(w).stats.children.Load()
		}
		return
	}
	current := first
	for i := 0; i < n; i++ {
		ev0, ls0 := total()
		if err := current.Release(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		var lease *distlock.Lease
		select {
		case lease = <-got[i]:
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d (arrival order) not woken by release %d", i, i)
		}
		if lease == nil {
			t.FailNow()
		}
		time.Sleep(200 * time.Millisecond) // let any stray wake-up show
		ev1, ls1 := total()
		if ev1-ev0 != 1 || ls1-ls0 != 1 {
			t.Errorf("release %d: %d watches fired and %d getChildren calls among %d waiters, want 1 and 1", i, ev1-ev0, ls1-ls0, n-i)
		}
		for j := i + 1; j < n; j++ {
			select {
			case <-got[j]:
				t.Fatalf("waiter %d acquired out of turn", j)
			default:
			}
		}
		current = lease
	}
	if err := current.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestFairEight: 8 waiters on 8 sessions of the ensemble acquire in
// arrival order.
func TestFairEight(t *testing.T) {
	c := ensemble(t)
	base := uniqueBase(t)
	const n = 8
	const key = "fair8"
	holder := dialT(t, c.Addrs(), WithBasePath(base))
	lease, err := holder.TryAcquire(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := 0; i < n; i++ {
		w := dialT(t, c.Addrs(), WithBasePath(base))
		warm(t, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := w.Acquire(ctxT(t, 2*time.Minute), key)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			_ = l.Release(context.Background())
		}()
		waitFor(t, 10*time.Second, "waiter queued", func() bool { return driverOf(w).stats.watches.Load() >= 1 })
	}
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("acquisition order %v, want 0..%d", order, n-1)
		}
	}
}

// TestKeys: keys the server would reject as path components (emoji,
// private-use code points, control characters, "/", "..") and 1 KiB keys
// all work and are distinct.
func TestKeys(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	admin := adminConn(t, addrs...)
	base := uniqueBase(t)
	if _, err := admin.Create(base[:strings.LastIndexByte(base, '/')], nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	// The pitfall: the Go client lets these through, the server refuses.
	for _, raw := range []string{"🔒", "\uE000x", "\U0010FFFD"} {
		_, err := admin.Create(base[:strings.LastIndexByte(base, '/')]+"/"+raw, nil, 0, zk.WorldACL(zk.PermAll))
		if err == nil {
			t.Logf("the server accepted %q as a node name", raw)
			continue
		}
		if errors.Is(err, zk.ErrInvalidPath) {
			t.Logf("%q: rejected by the Go client", raw)
		} else {
			t.Logf("%q: rejected by the server: %v", raw, err)
		}
	}
	a := dialT(t, addrs, WithBasePath(base))
	b := dialT(t, addrs, WithBasePath(base))
	long := strings.Repeat("L", 1024)
	keys := []string{
		"🔒", "🔒🔓", "\uE000", "\uF8FF", "\U0010FFFD", "\U000F0000", "\x00", "a\x01b", "\x1f", "\x7f", "\u0085",
		"/", "//", "a/b", "..", ".", "../..", "/zookeeper", "%", "%25", "k-", "\ufff0", "\ufffe",
		long, long[:1023], strings.Repeat("é", 512), "Key", "key", "key ", strings.Repeat("p", 250) + "1", strings.Repeat("p", 250) + "2",
	}
	var leases []*distlock.Lease
	for _, k := range keys {
		l, err := a.TryAcquire(ctxT(t, 10*time.Second), k)
		if err != nil {
			t.Errorf("TryAcquire(%q): %v", k, err)
			continue
		}
		leases = append(leases, l)
	}
	for _, l := range leases {
		if _, err := b.TryAcquire(ctxT(t, 10*time.Second), l.Key()); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("key %q not held for B: %v", l.Key(), err)
		}
	}
	names, _, err := admin.Children(base)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(keys) {
		t.Errorf("%d parents for %d keys", len(names), len(keys))
	}
	for _, n := range names {
		if k, ok := decodeKey(n); !ok || encodeKey(k) != n {
			t.Errorf("parent %q does not decode", n)
		}
	}
	for _, l := range leases {
		if err := l.Release(ctxT(t, 10*time.Second)); err != nil {
			t.Errorf("Release(%q): %v", l.Key(), err)
		}
	}
}

// TestForeignChildren: nodes under a key's parent that are not lock nodes
// are ignored.
func TestForeignChildren(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	admin := adminConn(t, addrs...)
	base := uniqueBase(t)
	a := dialT(t, addrs, WithBasePath(base))
	b := dialT(t, addrs, WithBasePath(base))
	const key = "foreign"
	warm(t, a)
	parent := base + "/" + encodeKey(key)
	if _, err := admin.CreateContainer(parent, nil, zk.FlagContainer, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"foo", "lock-", "_c_nothex-lock-", "_c_" + testGUID + "-read-"} {
		if _, err := admin.Create(parent+"/"+n, []byte("x"), zk.FlagSequence, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	la, err := a.TryAcquire(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatalf("TryAcquire with foreign children: %v", err)
	}
	if _, err := b.TryAcquire(ctxT(t, 10*time.Second), key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("B: %v, want busy", err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := b.Acquire(ctxT(t, 30*time.Second), key)
		if err == nil {
			err = l.Release(ctxT(t, 10*time.Second))
		}
		got <- err
	}()
	waitFor(t, 10*time.Second, "B waiting", func() bool { return driverOf(b).stats.watches.Load() >= 1 })
	if err := la.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("B: %v", err)
	}
	children, _, _ := admin.Children(parent)
	if len(children) != 4 {
		t.Errorf("children %v, want the 4 foreign ones untouched", children)
	}
}

// TestContainerParent: a key's parent is a container that the server
// deletes once empty, and a create under a parent reaped between calls is
// retried.
func TestContainerParent(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	admin := adminConn(t, addrs...)
	base := uniqueBase(t)
	const key = "container"
	parent := base + "/" + encodeKey(key)
	var creates atomic.Int32
	hooks := &testHooks{beforeCreate: func(p string) {
		// First create: the parent is missing. Second create (after
		// the parent was made): reap it, as the container reaper can
		// between two calls. Third: it goes through.
		if p == parent && creates.Add(1) == 2 {
			if err := admin.Delete(parent, -1); err != nil {
				t.Errorf("delete parent: %v", err)
			}
		}
	}}
	a := dialT(t, addrs, WithBasePath(base), withHooks(hooks))
	lease, err := a.TryAcquire(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatalf("TryAcquire with the parent reaped between calls: %v", err)
	}
	if n := creates.Load(); n != 3 {
		t.Errorf("%d creates, want 3 (missing parent, reaped parent, success)", n)
	}
	// A client's Stat does not show the node type (the server maps the
	// container mark, ephemeralOwner 0x8000000000000000, to 0), so the
	// proof is the reaper: it deletes the empty parent, but not an empty
	// persistent sibling used the same way.
	sibling := base + "/persistent-sibling"
	if _, err := admin.Create(sibling, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Create(sibling+"/child", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(sibling+"/child", -1); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if external() {
		return // the reaper interval is the server's default (60s)
	}
	start := time.Now()
	waitFor(t, 20*time.Second, "the empty parent reaped", func() bool {
		ok, _, err := admin.Exists(parent)
		return err == nil && !ok
	})
	t.Logf("empty parent reaped %v after release (reaper interval %dms)", time.Since(start).Round(time.Millisecond), containerCheckMs)
	time.Sleep(3 * containerCheckMs * time.Millisecond)
	if ok, _, err := admin.Exists(sibling); err != nil || !ok {
		t.Errorf("the persistent sibling was reaped too (%v, %v): the check proves nothing", ok, err)
	}
	// And the next acquisition re-creates it.
	lease, err = a.TryAcquire(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(ctxT(t, 10*time.Second))
}

// TestNegotiatedTimeout: the session timeout in use is the server's answer,
// not the request (clamped to [2, 20]×tickTime; testserver allows up to
// 60s, tickTime 200ms).
func TestNegotiatedTimeout(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	for _, c := range []struct{ ask, want time.Duration }{
		{100 * time.Second, 60 * time.Second},
		{100 * time.Millisecond, 400 * time.Millisecond},
		{5 * time.Second, 5 * time.Second},
	} {
		l := dialT(t, []string{s.Addr()}, WithSessionTimeout(c.ask), WithBasePath(uniqueBase(t)))
		warm(t, l)
		if got := sessionOf(l).Timeout(); !external() && got != c.want {
			t.Errorf("asked %v: negotiated %v, want %v", c.ask, got, c.want)
		}
		_ = l.Close()
	}
}

// TestNewOverConn: a Locker over the caller's connection leaves it open,
// reads the negotiated timeout when the conn was made by Connect, survives
// a session loss (go-zookeeper opens a new session) and deletes the nodes
// of a session it declared lost that is in fact alive.
func TestNewOverConn(t *testing.T) {
	needControl(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	admin := adminConn(t, addrs...)
	base := uniqueBase(t)
	const session = 4 * time.Second
	fa := &faults{}
	conn, _, err := Connect(addrs, WithSessionTimeout(session), WithDialer(fa.dial))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b := dialT(t, addrs, WithBasePath(base))

	// LoseOnDisconnect with a short cut: the lease ends, the session
	// lives on, and the node is deleted in the background.
	l, err := New(conn, WithBasePath(base), WithLossPolicy(LoseOnDisconnect))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := l.TryAcquire(ctxT(t, 10*time.Second), "conn")
	if err != nil {
		t.Fatal(err)
	}
	if sessionOf(l).Timeout() != session {
		t.Errorf("SessionTimeout %v, want %v", sessionOf(l).Timeout(), session)
	}
	sid := conn.SessionID()
	fa.cutNow(500 * time.Millisecond)
	select {
	case <-lease.Done():
	case <-time.After(session):
		t.Fatalf("lease not lost after the cut")
	}
	// The background deletion runs once the connection is back (re-dials
	// refused for 500ms, then go-zookeeper pauses 1s) on its backoff
	// (50ms doubling): a few seconds on a loaded machine. The session
	// check below shows that the Locker deleted the node, not the
	// session's expiry.
	other, err := b.Acquire(ctxT(t, slack.D(2*session)), "conn")
	if err != nil {
		t.Fatalf("B blocked by the lost lease's node (nodes %v): %v", lockNodes(t, admin, base, "conn"), err)
	}
	if conn.SessionID() != sid {
		t.Fatalf("session changed: the test wants the node deleted by the Locker")
	}
	_ = other.Release(ctxT(t, 10*time.Second))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if conn.State() != zk.StateHasSession {
		t.Errorf("Close closed the caller's connection: %v", conn.State())
	}

	// Partition past the session timeout: lost, then a new session.
	l, err = New(conn, WithBasePath(base))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err = l.TryAcquire(ctxT(t, 10*time.Second), "conn")
	if err != nil {
		t.Fatal(err)
	}
	fa.setBlackhole(true)
	select {
	case <-lease.Done():
	case <-time.After(3 * session):
		t.Fatalf("lease not lost in the partition")
	}
	// The server expires the session meanwhile, which deletes its node.
	waitFor(t, 3*session, "the server to expire the session", func() bool { return len(lockNodes(t, admin, base, "conn")) == 0 })
	fa.setBlackhole(false)
	again, err := l.Acquire(ctxT(t, 30*time.Second), "conn")
	if err != nil {
		t.Fatalf("after the partition: %v", err)
	}
	if conn.SessionID() == sid {
		t.Errorf("same session after the partition")
	}
	_ = again.Release(ctxT(t, 10*time.Second))

	// A plain *zk.Conn works with WithSessionTimeout.
	plain := adminConn(t, addrs...)
	pl, err := New(plain, WithBasePath(base), WithSessionTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	pls, err := pl.TryAcquire(ctxT(t, 10*time.Second), "plain")
	if err != nil {
		t.Fatal(err)
	}
	_ = pls.Release(ctxT(t, 10*time.Second))
}

// TestReentrancyScope: an owner id nests within one Locker (one session),
// also for a second acquisition that was already queued; the same owner id
// on another Locker is a competitor.
func TestReentrancyScope(t *testing.T) {
	s := standalone(t)
	addrs := []string{s.Addr()}
	base := uniqueBase(t)
	a := dialT(t, addrs, WithBasePath(base))
	a2 := dialT(t, addrs, WithBasePath(base))
	b := dialT(t, addrs, WithBasePath(base))
	owner := distlock.WithOwner("same-owner")
	const key = "reentrant"

	held, err := b.TryAcquire(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		lease *distlock.Lease
		err   error
	}
	r1, r2 := make(chan res, 1), make(chan res, 1)
	go func() { l, err := a.Acquire(ctxT(t, 30*time.Second), key, owner); r1 <- res{l, err} }()
	waitFor(t, 10*time.Second, "first queued", func() bool { return driverOf(a).stats.watches.Load() == 1 })
	go func() { l, err := a.Acquire(ctxT(t, 30*time.Second), key, owner); r2 <- res{l, err} }()
	waitFor(t, 10*time.Second, "second queued", func() bool { return driverOf(a).stats.watches.Load() == 2 })
	if err := held.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	x, y := <-r1, <-r2
	if x.err != nil || y.err != nil {
		t.Fatalf("queued acquisitions of one owner: %v, %v", x.err, y.err)
	}
	if x.lease.Token() != y.lease.Token() {
		t.Errorf("tokens %d and %d, want the holder's for both", x.lease.Token(), y.lease.Token())
	}
	// Another Locker, same owner id: not reentrant.
	if _, err := a2.TryAcquire(ctxT(t, 10*time.Second), key, owner); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("same owner on another session: %v, want ErrNotAcquired", err)
	}
	_ = x.lease.Release(ctxT(t, 10*time.Second))
	if _, err := b.TryAcquire(ctxT(t, 10*time.Second), key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("freed with a hold left: %v", err)
	}
	_ = y.lease.Release(ctxT(t, 10*time.Second))
	l, err := b.TryAcquire(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatalf("not freed after every hold was released: %v", err)
	}
	_ = l.Release(ctxT(t, 10*time.Second))
}

// TestNoLeak: goroutines return to their baseline after Close, and nothing
// but (soon reaped) empty containers is left under the base path.
func TestNoLeak(t *testing.T) {
	s := standalone(t)
	addrs := []string{s.Addr()}
	admin := adminConn(t, addrs...)
	base := uniqueBase(t)
	time.Sleep(100 * time.Millisecond)
	before := runtime.NumGoroutine()
	var ls []*distlock.Locker
	for i := 0; i < 3; i++ {
		l, err := Dial(addrs, WithBasePath(base), WithLogger(DiscardLogger))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	ctx := ctxT(t, time.Minute)
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := ls[i%3]
			key := []string{"a", "b", "c"}[i%3]
			for j := 0; j < 10; j++ {
				lease, err := l.Acquire(ctx, key)
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				if _, err := ls[(i+1)%3].TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
					t.Errorf("TryAcquire of a held key: %v", err)
				}
				_ = lease.Release(ctx)
			}
		}()
	}
	wg.Wait()
	// Abandoned waits and held leases at Close.
	held, _ := ls[0].TryAcquire(ctx, "held")
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := ls[1].Acquire(cctx, "held")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("abandoned Acquire: %v", err)
	}
	watches := driverOf(ls[2]).stats.watches.Load()
	go func() { _, _ = ls[2].Acquire(ctx, "held") }() // interrupted by Close
	waitFor(t, 10*time.Second, "the Acquire to wait", func() bool { return driverOf(ls[2]).stats.watches.Load() > watches })
	for _, l := range ls {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	if held != nil && !errors.Is(held.Err(), distlock.ErrClosed) {
		t.Errorf("held lease after Close: %v", held.Err())
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
	if n, err := heldNodes(admin, base); err != nil || len(n) != 0 {
		t.Errorf("lock nodes left: %v %v", n, err)
	}
	if external() {
		return
	}
	waitFor(t, 20*time.Second, "containers reaped", func() bool {
		children, _, err := admin.Children(base)
		return err == nil && len(children) == 0
	})
}

// TestRetryUnavailableNoSession: with WithRetryUnavailable, an Acquire that
// finds no session within the connect timeout (the ensemble refuses
// connections for a while) waits the outage out instead of failing: "no
// session in time" is a transient unavailability. (Before, it was a plain
// ErrUnavailable and Acquire failed after the connect timeout.)
func TestRetryUnavailableNoSession(t *testing.T) {
	needControl(t)
	s := standalone(t)
	fa := &faults{}
	const outage = 2 * time.Second
	fa.cutNow(outage) // refuse every dial for a while
	start := time.Now()
	a := dialT(t, []string{s.Addr()}, WithDialer(fa.dial), WithConnectTimeout(300*time.Millisecond), WithBasePath(uniqueBase(t)))
	lease, err := a.Acquire(ctxT(t, 30*time.Second), "outage", distlock.WithRetryUnavailable(true))
	if err != nil {
		t.Fatalf("Acquire with WithRetryUnavailable across %v of refused connections: %v (after %v)", outage, err, time.Since(start))
	}
	t.Logf("acquired %v after the start of the outage", time.Since(start).Round(time.Millisecond))
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Without the option the same outage fails at the connect timeout.
	fb := &faults{}
	fb.cutNow(outage)
	b := dialT(t, []string{s.Addr()}, WithDialer(fb.dial), WithConnectTimeout(300*time.Millisecond), WithBasePath(uniqueBase(t)))
	if _, err := b.Acquire(ctxT(t, 30*time.Second), "outage"); !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("Acquire during the outage without the option: %v, want ErrUnavailable", err)
	}
}
