package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/history"
)

// multiChecks are the checks of AcquireAll, which works over every Locker.
func multiChecks() []Check {
	return []Check{
		{"multi-overlap", "AcquireAll of overlapping key sets from 6 goroutines on 3 clients never deadlocks and never overlaps: a checked history per key", false, checkMultiOverlap},
		{"multi-processes", "AcquireAll of overlapping key sets from 4 worker processes never deadlocks and never overlaps: a checked history per key", false, checkMultiProcesses},
		{"multi-cancel", "AcquireAll that cannot have every key before its ctx ends returns ErrNotAcquired and the ctx error and leaves no key held", false, checkMultiCancel},
		{"multi-request-in-flight", "a TryAcquireAll whose requests are still in the network when its ctx ends leaves no key held: after the bounded cleanup another owner gets each key", false, checkMultiRequestInFlight},
		{"multi-lost-member", "a MultiLease ends (Done, Context, Err wrapping ErrLockLost) when any member is lost, and gives back the other members", false, checkMultiLostMember},
	}
}

func multiKeys(t T, h *Harness, name string, n int) []string {
	base := h.key(t, name)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/%d", base, i)
	}
	return keys
}

func checkMultiOverlap(t T, h *Harness) {
	const clients, goroutines = 3, 6
	rounds := rounds(20)
	keys := multiKeys(t, h, "multi", 5)
	var ls []*distlock.Locker
	for range clients {
		ls = append(ls, h.locker(t))
	}
	ctx := ctxFor(t, 2*time.Minute)
	rec := history.NewRecorder(nil)
	var wg sync.WaitGroup
	var failed sync.Once
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := fmt.Sprintf("g%d", g)
			for seq := range rounds {
				set := multiSet(keys, p, seq)
				for i, k := range set {
					rec.Add(history.Event{Process: p, Seq: memberSeq(seq, i, len(set)), Op: history.AcquireCall, Key: k})
				}
				m, err := ls[g%clients].AcquireAll(ctx, set, distlock.WithTTL(10*time.Second))
				if err != nil {
					failed.Do(func() { t.Errorf("AcquireAll(%q): %v (deadlocked until the ctx ended?)", set, err) })
					return
				}
				for i, ls := range m.Leases() {
					rec.Add(history.Event{Process: p, Seq: memberSeq(seq, i, len(set)), Op: history.AcquireOK, Key: ls.Key(), Owner: ls.Owner(), Token: ls.Token(), Deadline: history.Mono(ls.Deadline())})
				}
				for i, ls := range m.Leases() {
					rec.Add(history.Event{Process: p, Seq: memberSeq(seq, i, len(set)), Op: history.ReleaseCall, Key: ls.Key(), Deadline: history.Mono(ls.Deadline())})
				}
				if err := m.Release(ctx); err != nil {
					failed.Do(func() { t.Errorf("Release: %v", err) })
					return
				}
			}
		}()
	}
	wg.Wait()
	holds := history.Holds(rec.Events(), history.Now())
	if v := history.Check(holds); len(v) > 0 {
		t.Errorf("%d violations in %d member holds; first: %v", len(v), len(holds), v[0])
	}
}

func checkMultiProcesses(t T, h *Harness) {
	needURL(t, h)
	const workers = 4
	perWorker := rounds(50)
	holds, total := runWorkers(t, h, workers, workerConfig{Keys: multiKeys(t, h, "multi-procs", 5), Count: perWorker, HoldFor: time.Millisecond})
	if total < workers*perWorker {
		t.Fatalf("%d AcquireAll reported, want %d", total, workers*perWorker)
	}
	t.Logf("%d member holds by %d processes", len(holds), workers)
	if v := history.Check(holds); len(v) > 0 {
		t.Errorf("%d violations in %d member holds across %d processes; first: %v", len(v), len(holds), workers, v[0])
	}
}

func checkMultiCancel(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	keys := multiKeys(t, h, "multi-cancel", 3)
	blocker := mustTry(t, b, keys[1])
	for _, cancelIt := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		if cancelIt {
			time.AfterFunc(150*time.Millisecond, cancel)
		}
		_, err := a.AcquireAll(ctx, []string{keys[2], keys[0], keys[1]})
		cancel()
		if !errors.Is(err, distlock.ErrNotAcquired) || (!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)) {
			t.Fatalf("AcquireAll ended by its ctx: %v, want ErrNotAcquired and the ctx error", err)
		}
	}
	if _, err := a.TryAcquireAll(ctxFor(t, 10*time.Second), keys); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquireAll with a key held: %v, want ErrNotAcquired", err)
	}
	mustTry(t, b, keys[0]) // given back by the failed acquisitions
	mustTry(t, b, keys[2])
	mustRelease(t, blocker)
}

func checkMultiLostMember(t T, h *Harness) {
	a, op := h.locker(t), h.locker(t)
	keys := multiKeys(t, h, "multi-lost", 3)
	ctx := ctxFor(t, time.Minute)
	ttl := h.ttl()
	m, err := a.AcquireAll(ctx, keys, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	switch {
	case h.Faults.Expire != nil:
		if err := h.Faults.Expire(ctx, keys[1]); err != nil {
			t.Fatalf("Expire: %v", err)
		}
	default:
		if _, err := op.ForceRelease(ctx, keys[1]); err != nil {
			_ = m.Release(ctx)
			t.Skipf("no way to make one member lost (Faults.Expire, ForceRelease): %v", err)
		}
	}
	if !a.Capabilities().Expiring {
		// No automatic refresh: a session-bound holder notices at its
		// keepalive, or at once at a refresh.
		_ = m.Refresh(ctx, ttl)
	}
	select {
	case <-m.Done():
	case <-time.After(ttl + 10*time.Second):
		t.Fatalf("MultiLease still held %v after a member was lost", ttl+10*time.Second)
	}
	if err := m.Err(); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("MultiLease ended with %v, want ErrLockLost", err)
	}
	if cause := context.Cause(m.Context()); !errors.Is(cause, distlock.ErrLockLost) {
		t.Errorf("MultiLease context cause %v, want ErrLockLost", cause)
	}
	n, err := op.AcquireAll(ctx, keys)
	if err != nil {
		t.Fatalf("members of the ended MultiLease not given back: %v", err)
	}
	if err := m.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Release after the loss: %v, want ErrNotHeld", err)
	}
	if err := n.Err(); err != nil {
		t.Errorf("the new holder's MultiLease hurt by the old one's Release: %v", err)
	}
	if err := n.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}

func checkMultiRequestInFlight(t T, h *Harness) {
	b := h.locker(t)
	l, link := needDirectedLink(t, h)
	keys := multiKeys(t, h, "multi-reqflight", 3)
	m, err := l.TryAcquireAll(ctxFor(t, 10*time.Second), keys) // connections open, schema ready
	if err != nil {
		t.Fatalf("TryAcquireAll: %v", err)
	}
	if err := m.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	lostRequest(t, link, "TryAcquireAll", func(ctx context.Context) (*distlock.Lease, error) {
		m, err := l.TryAcquireAll(ctx, keys, distlock.WithTTL(orphanTTL))
		if err != nil {
			return nil, err
		}
		// Granted after all (the request left late): give the set back,
		// and hand lostRequest a lease of its own to release.
		if err := m.Release(ctxFor(t, 10*time.Second)); err != nil {
			return nil, err
		}
		return b.TryAcquire(ctxFor(t, 10*time.Second), keys[0])
	})
	for _, k := range keys {
		expectFreeSoon(t, b, k, "after a TryAcquireAll whose requests landed after its ctx ended")
	}
}
