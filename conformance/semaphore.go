package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/history"
)

// semaphoreChecks are the checks of counting semaphores, run on backends
// whose Locker.Semaphore does not refuse them (skipped with the backend's
// reason otherwise).
func semaphoreChecks() []Check {
	return []Check{
		{"semaphore-permits", "at most N permits of a semaphore are valid at any instant: 6 goroutines on 3 clients contend for 2 permits, a checked history", false, checkSemPermits},
		{"semaphore-processes", "at most N permits are valid at any instant across processes: 4 worker processes, 2 permits, a checked history", false, checkSemProcesses},
		{"semaphore-mutex", "a semaphore of 1 permit behaves as the mutex: one holder, busy for the others, tokens increasing over takeovers", false, checkSemMutex},
		{"semaphore-count", "the permit count is the semaphore's identity: another count while held gets ErrInvalidOption with both counts, and takes nothing", false, checkSemCount},
		{"semaphore-cancel", "an Acquire of a permit ended by its ctx returns ErrNotAcquired and the ctx error and leaves no permit behind", false, checkSemCancel},
		{"semaphore-request-in-flight", "a TryAcquire of a permit whose request is still in the network when its ctx ends leaves no permit behind: after the bounded cleanup another holder gets the one permit", false, checkSemRequestInFlight},
		{"semaphore-expiry", "a permit not refreshed expires after its TTL and is re-issued; the old holder's Release and Refresh get ErrNotHeld and never touch the new holder's permit", false, checkSemExpiry},
		{"semaphore-crash", "a permit of a holder killed with SIGKILL comes back after its TTL (or session timeout)", false, checkSemCrash},
		{"semaphore-pause", "a holder paused past its permit's TTL has its permit reported lost (its local deadline) before the permit is re-issued, and sees the loss on resume", false, checkSemPause},
	}
}

// semaphore returns the semaphore of n permits on key over l, or skips the
// check with the backend's reason if it has none.
func semaphore(t T, l *distlock.Locker, key string, n int) *distlock.Semaphore {
	t.Helper()
	s, err := l.Semaphore(key, n)
	if errors.Is(err, distlock.ErrInvalidOption) && n >= 1 {
		t.Skipf("no semaphores: %v", err)
	}
	if err != nil {
		t.Fatalf("Semaphore(%q, %d): %v", key, n, err)
	}
	return s
}

func checkSemPermits(t T, h *Harness) {
	const permits, clients, goroutines = 2, 3, 6
	rounds := rounds(25)
	key := h.key(t, "sem-permits")
	var sems []*distlock.Semaphore
	for range clients {
		sems = append(sems, semaphore(t, h.locker(t), key, permits))
	}
	ctx := ctxFor(t, 2*time.Minute)
	rec := history.NewRecorder(nil)
	var wg sync.WaitGroup
	var failed sync.Once
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := sems[g%clients]
			p := fmt.Sprintf("g%d", g)
			for seq := range rounds {
				rec.Add(history.Event{Process: p, Seq: seq, Op: history.AcquireCall, Key: key})
				lease, err := s.Acquire(ctx, distlock.WithTTL(10*time.Second))
				if err != nil {
					failed.Do(func() { t.Errorf("Acquire of a permit: %v", err) })
					return
				}
				rec.Add(history.Event{Process: p, Seq: seq, Op: history.AcquireOK, Key: key, Owner: lease.Owner(), Token: lease.Token(), Deadline: history.Mono(lease.Deadline())})
				time.Sleep(10 * time.Millisecond) // long enough for the others to be admitted meanwhile
				rec.Add(history.Event{Process: p, Seq: seq, Op: history.ReleaseCall, Key: key, Deadline: history.Mono(lease.Deadline())})
				if err := lease.Release(ctx); err != nil {
					failed.Do(func() { t.Errorf("Release of a permit: %v", err) })
					return
				}
			}
		}()
	}
	wg.Wait()
	holds := history.Holds(rec.Events(), history.Now())
	t.Logf("%d permits held, at most %d at once", len(holds), history.MaxActive(holds))
	if v := history.CheckCounting(holds, permits); len(v) > 0 {
		t.Errorf("%d violations in %d permits held; first: %v", len(v), len(holds), v[0])
	}
}

func checkSemProcesses(t T, h *Harness) {
	needURL(t, h)
	semaphore(t, h.locker(t), h.key(t, "probe"), 1) // skips without semaphores
	const workers, permits = 4, 2
	perWorker := rounds(100)
	key := h.key(t, "sem-procs")
	holds, total := runWorkers(t, h, workers, workerConfig{Key: key, Permits: permits, Count: perWorker, HoldFor: 5 * time.Millisecond})
	if len(holds) < workers*perWorker || total < workers*perWorker {
		t.Fatalf("%d permits recorded (%d reported), want %d", len(holds), total, workers*perWorker)
	}
	t.Logf("%d permits held by %d processes, at most %d at once", len(holds), workers, history.MaxActive(holds))
	if v := history.CheckCounting(holds, permits); len(v) > 0 {
		t.Errorf("%d violations in %d permits across %d processes; first: %v", len(v), len(holds), workers, v[0])
	}
}

// runWorkers runs workers processes in mode loop with cfg (ID, URL, TTL,
// Duration and History filled in) and returns their merged history's holds
// and the critical sections they reported.
func runWorkers(t T, h *Harness, workers int, cfg workerConfig) ([]history.Hold, int) {
	dir, err := os.MkdirTemp("", "distlock-history")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cfgs := make([]workerConfig, workers)
	for i := range cfgs {
		c := cfg
		c.ID, c.URL, c.Mode, c.TTL, c.Duration = fmt.Sprintf("w%d", i), h.URL, "loop", 10*time.Second, 4*time.Minute
		c.History, c.WaitGo = filepath.Join(dir, c.ID+".jsonl"), true
		cfgs[i] = c
	}
	ws := startWorkers(t, cfgs)
	for i, w := range ws {
		if err := w.send("go"); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	total := 0
	for i, w := range ws {
		m, ok := w.recv(5 * time.Minute)
		if !ok || m.Ev != "finished" {
			t.Fatalf("worker %d did not finish: %+v", i, m)
		}
		total += m.Done
	}
	var events []history.Event
	for i := range ws {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("w%d.jsonl", i)))
		if err != nil {
			t.Fatalf("history: %v", err)
		}
		evs, err := history.Read(f)
		f.Close()
		if err != nil {
			t.Fatalf("history: %v", err)
		}
		events = append(events, evs...)
	}
	return history.Holds(events, history.Now()), total
}

func checkSemMutex(t T, h *Harness) {
	key := h.key(t, "sem-mutex")
	a, b := semaphore(t, h.locker(t), key, 1), semaphore(t, h.locker(t), key, 1)
	ctx := ctxFor(t, time.Minute)
	p, err := a.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire of a free permit: %v", err)
	}
	if q, err := b.TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		if q != nil {
			_ = q.Release(ctx)
		}
		t.Fatalf("second holder of 1 permit: %v, want ErrNotAcquired", err)
	}
	first := p.Token()
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	q, err := b.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire after the release: %v", err)
	}
	if a.Capabilities().Fencing && q.Token() <= first {
		t.Errorf("token %d after %d: not increasing", q.Token(), first)
	}
	if err := q.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func checkSemCount(t T, h *Harness) {
	key := h.key(t, "sem-count")
	l := h.locker(t)
	ctx := ctxFor(t, time.Minute)
	p, err := semaphore(t, l, key, 2).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	_, err = semaphore(t, h.locker(t), key, 3).TryAcquire(ctx)
	var pe *backend.PermitsError
	if !errors.Is(err, distlock.ErrInvalidOption) || !errors.As(err, &pe) || pe.Have != 2 || pe.Want != 3 {
		t.Errorf("3 permits on a semaphore held with 2: %v, want a *backend.PermitsError{Have: 2, Want: 3}", err)
	}
	q, err := semaphore(t, l, key, 2).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("second of 2 permits after the refused count: %v (the refusal took a permit?)", err)
	}
	mustRelease(t, q)
	mustRelease(t, p)
}

func checkSemCancel(t T, h *Harness) {
	key := h.key(t, "sem-cancel")
	s := semaphore(t, h.locker(t), key, 2)
	other := semaphore(t, h.locker(t), key, 2)
	ctx := ctxFor(t, time.Minute)
	var held []*distlock.Lease
	for range 2 {
		p, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire: %v", err)
		}
		held = append(held, p)
	}
	for _, cancelIt := range []bool{false, true} {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		if cancelIt {
			time.AfterFunc(150*time.Millisecond, cancel)
		}
		_, err := other.Acquire(cctx)
		cancel()
		if !errors.Is(err, distlock.ErrNotAcquired) || (!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)) {
			t.Fatalf("Acquire of a permit ended by its ctx: %v, want ErrNotAcquired and the ctx error", err)
		}
	}
	for _, p := range held {
		mustRelease(t, p)
	}
	for i := range 2 {
		p, err := other.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("permit %d of 2 after the ended waits: %v (left behind by them?)", i+1, err)
		}
		defer mustRelease(t, p)
	}
	expectExpiredOrBusy(t, other, "a third permit of 2")
}

// expectExpiredOrBusy asserts that s has no free permit now.
func expectExpiredOrBusy(t T, s *distlock.Semaphore, why string) {
	t.Helper()
	p, err := s.TryAcquire(ctxFor(t, 10*time.Second))
	if err == nil {
		_ = p.Release(context.Background())
		t.Fatalf("%s: TryAcquire succeeded, want ErrNotAcquired", why)
	}
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("%s: %v, want ErrNotAcquired", why, err)
	}
}

func checkSemExpiry(t T, h *Harness) {
	key := h.key(t, "sem-expiry")
	l := h.locker(t)
	needs(t, l.Capabilities().Expiring, "Expiring")
	a, b := semaphore(t, l, key, 1), semaphore(t, h.locker(t), key, 1)
	ctx := ctxFor(t, time.Minute)
	old, err := a.TryAcquire(ctx, distlock.WithTTL(h.ttl()), distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	waitLost(t, old, h.ttl()+10*time.Second)
	p, err := b.Acquire(ctx)
	if err != nil {
		t.Fatalf("permit of an expired holder not re-issued: %v", err)
	}
	if a.Capabilities().Fencing && p.Token() <= old.Token() {
		t.Errorf("re-issued permit's token %d not above the expired one's %d", p.Token(), old.Token())
	}
	if err := old.Refresh(ctx, h.ttl()); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Refresh of an expired permit: %v, want ErrNotHeld", err)
	}
	if err := old.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Release of an expired permit: %v, want ErrNotHeld", err)
	}
	expectExpiredOrBusy(t, a, "the expired holder's Release gave back the new holder's permit")
	mustRelease(t, p)
}

// permitHolder starts a worker process that holds the one permit of a
// semaphore (name), and returns that semaphore on a Locker of this process.
func permitHolder(t T, h *Harness, name string) (*distlock.Semaphore, *worker) {
	needURL(t, h)
	key := h.key(t, name)
	s := semaphore(t, h.locker(t), key, 1)
	w := startWorker(t, workerConfig{ID: name, URL: h.URL, Key: key, Permits: 1, Mode: "hold", TTL: h.ttl()})
	if m, ok := w.recv(time.Minute); !ok || m.Ev != "acquired" {
		t.Fatalf("worker did not acquire a permit: %+v", m)
	}
	return s, w
}

func checkSemCrash(t T, h *Harness) {
	s, w := permitHolder(t, h, "sem-crash")
	expectExpiredOrBusy(t, s, "permit of a live holder process")
	start := time.Now()
	if err := w.signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	bound := h.takeoverBound(s.Capabilities())
	p, err := s.Acquire(ctxFor(t, bound+10*time.Second))
	if err != nil {
		t.Fatalf("permit of a killed holder not given back within %v: %v", bound+10*time.Second, err)
	}
	took := time.Since(start)
	t.Logf("permit re-issued %v after SIGKILL (bound %v)", took.Round(time.Millisecond), bound)
	if took > bound+3*time.Second {
		t.Errorf("re-issued after %v, want within TTL/session timeout %v + 3s", took, bound)
	}
	mustRelease(t, p)
}

func checkSemPause(t T, h *Harness) {
	s, w := permitHolder(t, h, "sem-pause")
	caps := s.Capabilities()
	if err := w.signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	bound := h.takeoverBound(caps)
	p, err := s.Acquire(ctxFor(t, 3*bound+10*time.Second))
	issued := history.Now()
	if err != nil {
		_ = w.signal(syscall.SIGCONT)
		if !caps.Expiring {
			t.Skipf("documented: a paused holder keeps its session, so its permit stays held — safe, not live: %v", err)
		}
		t.Fatalf("permit of a paused holder not re-issued: %v", err)
	}
	if err := w.signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
	if err := w.send("status"); err != nil {
		t.Fatalf("worker: %v", err)
	}
	m, ok := w.recv(30 * time.Second)
	if !ok || m.Ev != "status" {
		t.Fatalf("worker did not answer after resume: %+v", m)
	}
	if !m.Lost {
		t.Errorf("the resumed holder still believes it holds the permit that was re-issued")
	}
	if m.Deadline != 0 && m.Deadline > issued {
		t.Errorf("the paused holder's permit was valid until %v after it was re-issued", time.Duration(m.Deadline-issued))
	}
	mustRelease(t, p)
}

func checkSemRequestInFlight(t T, h *Harness) {
	key := h.key(t, "sem-reqflight")
	other := semaphore(t, h.locker(t), key, 1)
	l, link := needDirectedLink(t, h)
	s := semaphore(t, l, key, 1)
	p, err := s.TryAcquire(ctxFor(t, 10*time.Second)) // connections open, schema ready
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	mustRelease(t, p)
	lostRequest(t, link, "TryAcquire of a permit", func(ctx context.Context) (*distlock.Lease, error) {
		return s.TryAcquire(ctx, distlock.WithTTL(orphanTTL))
	})
	took := expectTakenSoon(t, func(ctx context.Context) (*distlock.Lease, error) { return other.TryAcquire(ctx) }, key,
		"after a TryAcquire of a permit whose request landed after its ctx ended")
	t.Logf("permit free %v after the held request landed", took.Round(time.Millisecond))
}
