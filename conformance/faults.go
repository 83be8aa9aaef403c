package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/history"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// faultChecks are the checks that need fault hooks, worker processes or both.
func faultChecks() []Check {
	return []Check{
		{"processes", "mutual exclusion and fencing order hold across processes: 4 worker processes, 1,000 critical sections, a checked history", false, checkProcesses},
		{"pause-holder", "a holder paused past its lease learns of the loss on resume, and with fencing its stale write is refused by the fence package guards (fence.Redis; fence.SQL where the harness has PostgreSQL)", false, checkPauseHolder},
		{"crash-holder", "a holder killed with SIGKILL frees the lock after its TTL (or session timeout)", false, checkCrashHolder},
		{"late-grant", "a grant that arrives after the TTL is refused and cleaned up", false, checkLateGrant},
		{"partitioned-holder", "a holder cut off from the backend reports the loss no later than another owner acquires", false, checkPartitionedHolder},
		{"cancel-in-flight", "an acquisition cancelled after its request was sent leaves nothing behind", false, checkCancelInFlight},
		{"request-in-flight", "an acquisition whose request is still in the network when its ctx ends leaves no lock behind: after the bounded cleanup another owner acquires at once", false, checkRequestInFlight},
		{"request-in-flight-close", "an acquisition whose request is still in the network when its ctx ends, followed at once by Close of its Locker, leaves no lock behind: after the bounded cleanup another owner acquires", false, checkRequestInFlightClose},
		{"request-in-flight-owner", "a WithOwner acquisition whose request is still in the network when its ctx ends, retried by its owner after the lost request landed, nests, and the owner's one Release frees the lock (after the bounded cleanup)", false, checkRequestInFlightOwner},
		{"silent-connection", "every Acquire and TryAcquire returns within its ctx plus a bounded slack while a connection of the client, or every one, is silent one way", false, checkSilentConnection},
		{"bad-input", "bad TTLs and URLs get typed errors; an unreachable backend gets ErrUnavailable within ctx", false, checkBadInput},
		{"backend-down", "with the backend down Acquire returns ErrUnavailable within its ctx, nothing leaks, and the Locker recovers", true, checkBackendDown},
		{"server-faults", "mutual exclusion holds while the backend's servers fail and recover under load", true, checkServerFaults},
	}
}

func needURL(t T, h *Harness) {
	t.Helper()
	if h.URL == "" {
		t.Skipf("the harness has no URL for worker processes (Harness.URL)")
	}
}

// takeoverBound is how long another owner may need to take a lock whose
// holder is gone: its TTL, or the session timeout.
func (h *Harness) takeoverBound(caps distlock.Capabilities) time.Duration {
	if caps.Expiring {
		return h.ttl()
	}
	return h.sessionTimeout()
}

func checkProcesses(t T, h *Harness) {
	needURL(t, h)
	const workers = 4
	perWorker := rounds(250)
	holds, total := runWorkers(t, h, workers, workerConfig{Key: h.key(t, "procs"), Count: perWorker})
	if len(holds) < workers*perWorker || total < workers*perWorker {
		t.Fatalf("%d critical sections recorded (%d reported), want %d", len(holds), total, workers*perWorker)
	}
	if v := history.Check(holds); len(v) > 0 {
		t.Errorf("%d violations in %d critical sections across %d processes; first: %v", len(v), len(holds), workers, v[0])
	}
}

func checkPauseHolder(t T, h *Harness) {
	needURL(t, h)
	b := h.locker(t)
	caps := b.Capabilities()
	key := h.key(t, "pause")
	w := startWorker(t, workerConfig{ID: "paused", URL: h.URL, Key: key, Mode: "hold", TTL: h.ttl(), Fenced: h.FencedRedis, FencedPG: h.FencedPostgres})
	m, ok := w.recv(time.Minute)
	if !ok || m.Ev != "acquired" {
		t.Fatalf("worker did not acquire: %+v", m)
	}
	if err := w.signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	paused := time.Now()
	bound := h.takeoverBound(caps)
	lease, err := b.Acquire(ctxFor(t, 3*bound+10*time.Second), key)
	if err != nil {
		if !caps.Expiring {
			_ = w.signal(syscall.SIGCONT)
			t.Skipf("documented: a paused holder keeps its session (its connection stays open), so the lock stays held — safe, not live: %v", err)
		}
		t.Fatalf("no takeover while the holder was paused %v: %v", time.Since(paused), err)
	}
	t.Logf("taken over %v after the pause", time.Since(paused).Round(time.Millisecond))
	// The fenced resources, behind the guards users get (package fence):
	// the new owner writes to each.
	var stores []fencedStore
	if caps.Fencing {
		stores, err = openFencedStores(t.Context(), h.FencedRedis, h.FencedPostgres, key)
		if err != nil {
			t.Fatalf("fenced resources: %v", err)
		}
		defer closeStores(stores)
		for _, s := range stores {
			if err := s.write(t.Context(), lease.Token(), "new-owner"); err != nil {
				t.Fatalf("new owner's fenced write to %s: %v", s.name(), err)
			}
		}
	}
	if err := w.signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
	if err := w.send("write"); err != nil {
		t.Fatalf("worker: %v", err)
	}
	m, ok = w.recv(30 * time.Second)
	if !ok || m.Ev != "write" {
		t.Fatalf("worker did not answer after resume: %+v", m)
	}
	if !m.Lost {
		t.Errorf("the resumed holder still believes it holds the lock that another owner took")
	}
	if len(stores) > 0 {
		if m.OK || !m.Stale {
			t.Errorf("the paused holder's write with its old token %d was not refused by every fenced resource: %+v", m.Token, m)
		}
		for _, s := range stores {
			if writer, _ := s.writer(t.Context()); writer != "new-owner" {
				t.Errorf("%s written by %q, want the new owner's write intact", s.name(), writer)
			}
		}
	}
	mustRelease(t, lease)
	switch {
	case !caps.Fencing:
		t.Skipf("documented unsafe: no fencing tokens — the resumed holder saw its loss, but a holder that writes without checking overwrites the new owner")
	case len(stores) == 0:
		t.Skipf("no fenced resource (Harness.FencedRedis, FencedPostgres): loss on resume checked, stale write not")
	}
	t.Logf("the paused holder's write was refused by %d fenced resource(s): %s", len(stores), storeNames(stores))
}

func checkCrashHolder(t T, h *Harness) {
	needURL(t, h)
	b := h.locker(t)
	caps := b.Capabilities()
	key := h.key(t, "crash")
	w := startWorker(t, workerConfig{ID: "crashed", URL: h.URL, Key: key, Mode: "hold", TTL: h.ttl()})
	if m, ok := w.recv(time.Minute); !ok || m.Ev != "acquired" {
		t.Fatalf("worker did not acquire: %+v", m)
	}
	expectBusy(t, b, key, "lock of a live holder process")
	start := time.Now()
	if err := w.signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	bound := h.takeoverBound(caps)
	lease, err := b.Acquire(ctxFor(t, bound+10*time.Second), key)
	if err != nil {
		t.Fatalf("lock of a killed holder not taken over within %v: %v", bound+10*time.Second, err)
	}
	took := time.Since(start)
	t.Logf("taken over %v after SIGKILL (bound %v)", took.Round(time.Millisecond), bound)
	if took > bound+slack.D(3*time.Second) {
		t.Errorf("takeover after %v, want within TTL/session timeout %v + 3s", took, bound)
	}
	mustRelease(t, lease)
}

func needLink(t T, h *Harness) (*distlock.Locker, Link) {
	t.Helper()
	if h.Faults.NewLinkedLocker == nil {
		t.Skipf("the harness cannot put a fault on one client's link (Faults.NewLinkedLocker)")
	}
	l, link, err := h.Faults.NewLinkedLocker(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatalf("NewLinkedLocker: %v", err)
	}
	t.Cleanup(func() {
		link.Heal()
		_ = l.Close()
		if c, ok := link.(io.Closer); ok {
			_ = c.Close()
		}
	})
	return l, link
}

func checkLateGrant(t T, h *Harness) {
	b := h.locker(t)
	needs(t, b.Capabilities().Expiring, "Expiring (no TTL for a grant to outlive)")
	l, link := needLink(t, h)
	key, ttl := h.key(t, "late"), h.ttl()
	link.SetLatency(ttl) // the reply arrives after 2×ttl
	start := time.Now()
	lease, err := l.TryAcquire(ctxFor(t, 10*ttl+10*time.Second), key, distlock.WithTTL(ttl))
	if err == nil {
		if lease.Err() == nil {
			t.Errorf("a grant that arrived %v after its request (TTL %v) was reported held", time.Since(start), ttl)
		}
		_ = lease.Release(context.Background())
	} else {
		t.Logf("late grant refused after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	link.Heal()
	expectFree(t, b, key, ttl+5*time.Second, "after the late grant")
}

func checkPartitionedHolder(t T, h *Harness) {
	b := h.locker(t)
	caps := b.Capabilities()
	l, link := needLink(t, h)
	key := h.key(t, "partition")
	lease := mustAcquire(t, l, key, distlock.WithTTL(h.ttl()))
	var lostAt time.Time
	lostCh := make(chan struct{})
	go func() {
		<-lease.Done()
		lostAt = time.Now()
		close(lostCh)
	}()
	link.Blackhole()
	start := time.Now()
	bound := h.takeoverBound(caps)
	other, err := b.Acquire(ctxFor(t, 3*bound+10*time.Second), key)
	acquiredAt := time.Now()
	if err != nil {
		if !caps.Expiring && lease.Err() == nil {
			link.Heal()
			t.Skipf("documented: the partitioned holder's session outlives this partition (its server never saw it end), so the lock stays with it — safe, not live: %v", err)
		}
		t.Fatalf("no takeover during the partition (%v): %v", time.Since(start), err)
	}
	select {
	case <-lostCh:
	default:
		t.Fatalf("another owner acquired %v into the partition but the holder's Done is still open", acquiredAt.Sub(start))
	}
	margin := acquiredAt.Sub(lostAt)
	t.Logf("holder learned of the loss %v into the partition, %v before the takeover", lostAt.Sub(start).Round(time.Millisecond), margin.Round(time.Millisecond))
	if margin < 0 {
		t.Errorf("the holder learned of its loss %v after another owner acquired", -margin)
	}
	if !errors.Is(lease.Err(), distlock.ErrLockLost) {
		t.Errorf("partitioned lease ended with %v, want ErrLockLost", lease.Err())
	}
	mustRelease(t, other)
	link.Heal()
	// The client recovers once the partition heals.
	lease2, err := l.Acquire(ctxFor(t, 60*time.Second), key)
	if err != nil {
		t.Fatalf("client not usable after the partition healed: %v", err)
	}
	mustRelease(t, lease2)
}

func checkCancelInFlight(t T, h *Harness) {
	b := h.locker(t)
	l, link := needLink(t, h)
	key := h.key(t, "inflight")
	link.SetLatency(300 * time.Millisecond)
	// A TTL far longer than the check: only cleanup can free the lock in
	// time.
	ctx, cancel := context.WithTimeout(t.Context(), 450*time.Millisecond)
	defer cancel()
	start := time.Now()
	lease, err := l.TryAcquire(ctx, key, distlock.WithTTL(10*time.Minute))
	if err == nil {
		_ = lease.Release(context.Background())
		t.Skipf("the acquisition finished before its context ended; no ambiguous outcome to test")
	}
	if took := time.Since(start); took > slack.D(2*time.Second) {
		t.Errorf("cancelled acquisition returned after %v, want promptly", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled acquisition: %v, want the ctx error", err)
	}
	link.Heal()
	expectFree(t, b, key, 15*time.Second, "after an acquisition cancelled in flight (TTL 10m)")
	if h.Faults.Held != nil {
		// Every lock of the suite has been released by now. Cleanup of
		// an ambiguous attempt runs in the background, bounded in time
		// (a quorum backend also clears minority nodes): allow it 15s,
		// far below the 10-minute TTL an orphan would otherwise keep.
		deadline := time.Now().Add(15 * time.Second)
		for {
			held, err := h.Faults.Held(ctxFor(t, 10*time.Second))
			if err != nil {
				t.Fatalf("Held: %v", err)
			}
			if len(held) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("left behind in the backend 15s after the cancelled acquisition: %v", held)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func checkBadInput(t T, h *Harness) {
	a := h.locker(t)
	key := h.key(t, "badinput")
	ctx := ctxFor(t, time.Minute)
	for _, ttl := range append([]time.Duration{distlock.MaxTTL + 1, 1<<63 - 1}, h.BadTTLs...) {
		if lease, err := a.TryAcquire(ctx, key, distlock.WithTTL(ttl)); !errors.Is(err, distlock.ErrInvalidTTL) {
			if lease != nil {
				_ = lease.Release(ctx)
			}
			t.Errorf("TTL %v: %v, want ErrInvalidTTL", ttl, err)
		}
	}
	var bad []string
	if h.URL != "" {
		scheme := h.URL[:strings.Index(h.URL, ":")]
		bad = append(bad, scheme+"://[::1", scheme+"://127.0.0.1:99999999", scheme+"://127.0.0.1:1/?no_such_parameter=1", scheme+":/%zz")
	}
	RefusesURLs(t, append(bad, h.BadURLs...)...)
	if h.UnreachableURL != "" {
		start := time.Now()
		l, err := distlock.Open(ctx, h.UnreachableURL)
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			start = time.Now()
			_, err = l.Acquire(actx, key)
			cancel()
			took := time.Since(start)
			closeStart := time.Now()
			_ = l.Close()
			if d := time.Since(closeStart); d > slack.D(15*time.Second) {
				t.Errorf("Close of a Locker on an unreachable backend took %v", d)
			}
			if took > slack.D(3*time.Second) {
				t.Errorf("Acquire on an unreachable backend returned after %v, want within its 2s ctx", took)
			}
		} else if took := time.Since(start); took > slack.D(15*time.Second) {
			t.Errorf("Open of an unreachable backend took %v", took)
		}
		if !errors.Is(err, distlock.ErrUnavailable) {
			t.Errorf("unreachable backend: %v, want ErrUnavailable", err)
		}
	}
}

func checkBackendDown(t T, h *Harness) {
	if h.Faults.StopBackend == nil || h.Faults.StartBackend == nil {
		t.Skipf("the harness cannot stop and start the backend (Faults.StopBackend/StartBackend)")
	}
	l := h.locker(t)
	key := h.key(t, "down")
	mustRelease(t, mustTry(t, l, key)) // connected
	before := runtime.NumGoroutine()
	if err := h.Faults.StopBackend(ctxFor(t, time.Minute)); err != nil {
		t.Fatalf("StopBackend: %v", err)
	}
	started := false
	t.Cleanup(func() {
		if !started {
			_ = h.Faults.StartBackend(context.Background())
		}
	})
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		start := time.Now()
		_, err := l.Acquire(ctx, key)
		cancel()
		took := time.Since(start)
		if !errors.Is(err, distlock.ErrUnavailable) {
			t.Errorf("Acquire with the backend down: %v, want ErrUnavailable", err)
		}
		if took > slack.D(3*time.Second) {
			t.Errorf("Acquire with the backend down returned after %v, want within its 2s ctx", took)
		}
	}
	if err := h.Faults.StartBackend(ctxFor(t, 2*time.Minute)); err != nil {
		t.Fatalf("StartBackend: %v", err)
	}
	started = true
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		lease, err := l.Acquire(ctx, key)
		cancel()
		if err == nil {
			mustRelease(t, lease)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Locker did not recover within 60s of the backend's return: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Goroutines settle back (client reconnect loops end).
	settle := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+5 && time.Now().Before(settle) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+5 {
		t.Errorf("%d goroutines after the outage, %d before: leak", n, before)
	}
}

// The server-faults check: its workers' lease TTL, and how long each fault
// lasts (longer than the TTL, so leases run out during it).
const (
	serverFaultTTL    = 2 * time.Second
	serverFaultLength = 3 * time.Second
)

// serverFaultMark is when a fault of the server-faults check began, for
// naming the fault a violation followed.
type serverFaultMark struct {
	name string
	at   int64 // history.Now
}

// checkServerFaults injects the harness's server faults one after another
// into one set of worker processes that contend for one key until the end.
// Before each fault the workers complete critical sections (the fault hits
// a backend in use, recovered from the previous one); after each heal they
// must complete critical sections again within a bound; the merged history
// must show mutual exclusion throughout.
func checkServerFaults(t T, h *Harness) {
	needURL(t, h)
	if len(h.Faults.ServerFaults) == 0 {
		t.Skipf("the harness has no server faults to inject (Faults.ServerFaults)")
	}
	key := h.key(t, "srvfault")
	dir, err := os.MkdirTemp("", "distlock-history")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	const workers = 4
	cfgs := make([]workerConfig, workers)
	for i := range cfgs {
		cfgs[i] = workerConfig{
			ID: fmt.Sprintf("w%d", i), URL: h.URL, Key: key, Mode: "loop", TTL: serverFaultTTL,
			Count: 1 << 30, Duration: 10 * time.Minute, History: filepath.Join(dir, fmt.Sprintf("w%d.jsonl", i)), Progress: true,
		}
	}
	ws := startWorkers(t, cfgs)
	p := watchProgress(ws)
	ctx := t.Context()
	// A recovery may wait for a dead holder's lease or session to end.
	bound := slack.D(30*time.Second + serverFaultTTL + 2*h.sessionTimeout())
	const steady = 2 * workers // critical sections that show the workers at work
	var marks []serverFaultMark
	if !p.waitFor(ctx, steady, bound) {
		t.Errorf("no critical section completed within %v before the first fault", bound)
	}
	for _, f := range h.Faults.ServerFaults {
		if t.Failed() {
			break
		}
		marks = append(marks, serverFaultMark{f.Name, history.Now()})
		heal, err := f.Inject(ctxFor(t, time.Minute))
		if err != nil {
			t.Fatalf("%s: inject: %v", f.Name, err)
		}
		time.Sleep(serverFaultLength)
		if err := heal(ctxFor(t, 2*time.Minute)); err != nil {
			t.Fatalf("%s: heal: %v", f.Name, err)
		}
		healed, n := time.Now(), p.count()
		if !p.waitFor(ctx, n+steady, bound) {
			t.Errorf("%s: %d critical sections completed within %v of the heal, want %d", f.Name, p.count()-n, bound, steady)
			break
		}
		t.Logf("%s: %d critical sections %v after the heal", f.Name, steady, time.Since(healed).Round(time.Millisecond))
	}
	total := 0
	for _, w := range ws {
		_ = w.send("stop")
	}
	var events []history.Event
	for i := range ws {
		m, ok := p.result(i, time.Minute)
		if !ok || m.Ev != "finished" {
			t.Fatalf("worker %d did not finish: %+v", i, m)
		}
		total += m.Done
		fh, err := os.Open(filepath.Join(dir, fmt.Sprintf("w%d.jsonl", i)))
		if err != nil {
			t.Fatalf("history: %v", err)
		}
		evs, _ := history.Read(fh)
		fh.Close()
		events = append(events, evs...)
	}
	v := history.Check(history.Holds(events, history.Now()))
	t.Logf("%d critical sections by %d processes through %d faults, %d violations", total, workers, len(marks), len(v))
	if len(v) > 0 {
		t.Errorf("%d violations; first, after the fault %q: %v", len(v), faultBefore(marks, max(v[0].A.Start, v[0].B.Start)), v[0])
	}
}

// faultBefore names the last fault that began before at.
func faultBefore(marks []serverFaultMark, at int64) string {
	name := "(none: before the first fault)"
	for _, m := range marks {
		if m.at <= at {
			name = m.name
		}
	}
	return name
}

// RefusesURLs checks that distlock.Open refuses every one of urls with an
// error wrapping ErrInvalidOption, without panicking (a panic is reported
// against its URL) and without opening anything.
func RefusesURLs(t T, urls ...string) {
	t.Helper()
	for _, u := range urls {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("Open(%q) panicked: %v", u, p)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			l, err := distlock.Open(ctx, u)
			if err == nil {
				_ = l.Close()
				t.Errorf("Open(%q) succeeded, want ErrInvalidOption", u)
				return
			}
			if !errors.Is(err, distlock.ErrInvalidOption) {
				t.Errorf("Open(%q) = %v, want ErrInvalidOption", u, err)
			}
		}()
	}
}

func storeNames(stores []fencedStore) string {
	names := make([]string, len(stores))
	for i, s := range stores {
		names[i] = s.name()
	}
	return strings.Join(names, ", ")
}
