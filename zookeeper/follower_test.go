package zookeeper

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/history"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// The pause of a lagging follower: SIGSTOP for less than the ensemble's
// syncLimit (3s with testserver's tickTime), so the leader keeps it as a
// follower and commits without it; once resumed it serves its clients
// again while it catches up.
const followerPause = 1200 * time.Millisecond

// followerLockers returns Lockers pinned to the leader, to one follower
// (the one the test pauses, returned too) and to the other follower.
func followerLockers(t *testing.T, c *testserver.Cluster, base string) (lead, lag, other *distlock.Locker, lagging *testserver.Server) {
	t.Helper()
	var followers []*testserver.Server
	var leader *testserver.Server
	for _, s := range c.Servers {
		switch m, err := srvrMode(s.Addr()); {
		case err != nil:
			t.Fatalf("srvr %s: %v", s.Addr(), err)
		case m == "leader":
			leader = s
		case m == "follower":
			followers = append(followers, s)
		}
	}
	if leader == nil || len(followers) != 2 {
		t.Fatalf("ensemble roles: leader %v, followers %v", leader, followers)
	}
	dial := func(s *testserver.Server) *distlock.Locker {
		l := dialT(t, []string{s.Addr()}, WithSessionTimeout(6*time.Second), WithBasePath(base))
		warm(t, l)
		return l
	}
	lagging = followers[0]
	t.Cleanup(func() { _ = lagging.Resume() })
	return dial(leader), dial(lagging), dial(followers[1]), lagging
}

// TestLaggingFollowerStaleReads: a client connected to a follower that
// missed the latest transactions (paused while the leader and the other
// follower committed a grant) must not see the lock free. Its create goes
// through the leader and is answered only once its server has applied
// everything before it, the earlier holder's node included; Inspect syncs
// first.
func TestLaggingFollowerStaleReads(t *testing.T) {
	needControl(t)
	c := ensemble(t)
	base := uniqueBase(t)
	lead, lag, _, lagging := followerLockers(t, c, base)
	const key = "lagging-follower"
	if err := lagging.Pause(); err != nil {
		t.Fatal(err)
	}
	held, err := lead.Acquire(ctxT(t, 10*time.Second), key, distlock.WithOwner("leader-side"))
	if err != nil {
		_ = lagging.Resume()
		t.Fatal(err)
	}
	time.Sleep(followerPause) // the follower stays behind for a while
	if err := lagging.Resume(); err != nil {
		t.Fatal(err)
	}
	got, err := lag.TryAcquire(ctxT(t, slack.D(20*time.Second)), key)
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire through the lagging follower while the leader's client holds = %v, %v; want ErrNotAcquired", got, err)
	}
	info, err := lag.Inspect(ctxT(t, slack.D(20*time.Second)), key)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Owner != "leader-side" || info.Token != held.Token() {
		t.Errorf("Inspect through the lagging follower = %+v, want held by leader-side with token %d", info, held.Token())
	}
	if err := held.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	admin := adminConn(t, c.Addrs()...)
	waitFor(t, slack.D(20*time.Second), "no lock node left", func() bool {
		held, err := heldNodes(admin, base)
		return err == nil && len(held) == 0
	})
}

// TestLaggingFollowerExclusion: clients on the leader and on both
// followers contend for one lock while one follower is paused and resumed
// again and again (lagging behind the leader each time). The recorded
// history has no overlapping holds (a hold ends at its release, at the
// lease's loss, or at its validity deadline), and nothing is left behind.
func TestLaggingFollowerExclusion(t *testing.T) {
	needControl(t)
	c := ensemble(t)
	base := uniqueBase(t)
	lead, lag, other, lagging := followerLockers(t, c, base)
	const key = "lagging-follower-mutex"
	rec := history.NewRecorder(nil)
	run := slack.D(8 * time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), run)
	defer cancel()
	var wg sync.WaitGroup
	grants := map[string]int{}
	var mu sync.Mutex
	for name, l := range map[string]*distlock.Locker{"leader": lead, "lagging": lag, "follower": other} {
		wg.Go(func() {
			for seq := 0; ctx.Err() == nil && seq < 10_000; seq++ {
				rec.Add(history.Event{Process: name, Seq: seq, Op: history.AcquireCall, Key: key})
				actx, acancel := context.WithTimeout(ctx, 3*time.Second)
				lease, err := l.Acquire(actx, key)
				acancel()
				if err != nil {
					rec.Add(history.Event{Process: name, Seq: seq, Op: history.AcquireFail, Key: key, Err: err.Error()})
					continue
				}
				rec.Add(history.Event{Process: name, Seq: seq, Op: history.AcquireOK, Key: key, Token: lease.Token(), Deadline: mono(lease.Deadline())})
				mu.Lock()
				grants[name]++
				mu.Unlock()
				select {
				case <-lease.Done():
					rec.Add(history.Event{Process: name, Seq: seq, Op: history.Lost, Key: key})
				case <-time.After(10 * time.Millisecond):
				}
				rec.Add(history.Event{Process: name, Seq: seq, Op: history.ReleaseCall, Key: key, Deadline: mono(lease.Deadline())})
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := lease.Release(rctx); err != nil && !errors.Is(err, distlock.ErrNotHeld) {
					t.Errorf("%s: Release: %v", name, err)
				}
				rcancel()
			}
		})
	}
	pauses := 0
	for ctx.Err() == nil {
		if err := lagging.Pause(); err != nil {
			t.Fatal(err)
		}
		pauses++
		select {
		case <-ctx.Done():
		case <-time.After(followerPause):
		}
		if err := lagging.Resume(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(600 * time.Millisecond):
		}
	}
	wg.Wait()
	holds := history.Holds(rec.Events(), history.Now())
	if v := history.Check(holds); len(v) > 0 {
		t.Errorf("%d violations in %d holds; first: %v", len(v), len(holds), v[0])
	}
	t.Logf("%d holds over %v with %d pauses of the follower: %v", len(holds), run, pauses, grants)
	if grants["lagging"] == 0 {
		t.Errorf("no grant through the lagging follower (%v): the test proved nothing about it", grants)
	}
	admin := adminConn(t, c.Addrs()...)
	waitFor(t, slack.D(20*time.Second), "no lock node left", func() bool {
		held, err := heldNodes(admin, base)
		return err == nil && len(held) == 0
	})
}

// mono converts a lease deadline for history (0: none).
func mono(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return history.Mono(t)
}
