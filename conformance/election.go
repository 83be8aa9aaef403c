package conformance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/history"
)

// electionChecks run distlock.Election with candidates in worker processes
// (and, for the partition, one in this process behind a faulty link) and
// check the recorded history: every term is an interval from its start to
// the moment its candidate saw it end or its lease's validity deadline,
// whichever came first; no two terms of different candidates overlap,
// tokens increase from term to term, and no candidate acts (a Beat: its
// Term.Err() was nil) at or after its lease's deadline.
func electionChecks() []Check {
	return []Check{
		{"election-pause", "a leader paused (SIGSTOP) past its lease is replaced, and on resume sees its term ended before it acts; at most one leader per instant, increasing terms", false, checkElectionPause},
		{"election-kill", "a leader killed with SIGKILL is replaced within its TTL (or session timeout) plus one acquisition; at most one leader per instant, increasing terms", false, checkElectionKill},
		{"election-partition", "a leader cut off from the backend ends its term no later than another candidate's term begins, and leads again after the partition heals", false, checkElectionPartition},
	}
}

// beatEvery is how often a leader acts (records a Beat) while its term lasts.
const beatEvery = 10 * time.Millisecond

// runCandidate campaigns for key until ctx ends, as a replica of a service
// would: each term it wins it acts every beatEvery after checking
// Term.Err(), recording the term in rec and telling say when it starts and
// ends leading. It returns Lead's error (ctx's when ctx ends).
func runCandidate(ctx context.Context, l *distlock.Locker, id, key string, ttl time.Duration, rec *history.Recorder, say func(workerMsg)) error {
	e, err := distlock.NewElection(l, key, id,
		distlock.WithTermOptions(distlock.WithTTL(ttl)),
		distlock.WithRecampaignBackoff(distlock.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}))
	if err != nil {
		return err
	}
	seq := 0
	return e.Lead(ctx, func(tctx context.Context, term *distlock.Term) error {
		seq++
		lease := term.Lease()
		ev := history.Event{Process: id, Seq: seq, Key: key, Owner: lease.Owner(), Token: term.Token()}
		rec.Add(with(ev, history.AcquireOK, 0, history.Mono(lease.Deadline())))
		say(workerMsg{Ev: "leader", Token: term.Token()})
		tick := time.NewTicker(beatEvery)
		defer tick.Stop()
		for {
			at := history.Now() // before the check: an action happens after it
			if err := term.Err(); err != nil {
				rec.Add(with(ev, history.Lost, 0, 0))
				say(workerMsg{Ev: "lost", Err: oneLineErr(err)})
				return err
			}
			rec.Add(with(ev, history.Beat, at, history.Mono(lease.Deadline())))
			select {
			case <-tick.C:
				continue
			case <-tctx.Done():
			}
			if ctx.Err() == nil && term.Err() == nil {
				err := errors.New("the term's context ended while Term.Err() is nil")
				say(workerMsg{Ev: "error", Err: err.Error()})
				return err
			}
			if ctx.Err() != nil { // stopping: Lead resigns the term
				rec.Add(with(ev, history.ReleaseCall, 0, history.Mono(lease.Deadline())))
				return nil
			}
		}
	})
}

// with returns ev as an event of op at (0: now) with deadline dl.
func with(ev history.Event, op history.Op, at, dl int64) history.Event {
	ev.Op, ev.Time, ev.Deadline = op, at, dl
	return ev
}

// workerElect is a worker process's candidate: it campaigns until it reads
// "quit" (or its stdin closes) or cfg.Duration passes.
func workerElect(ctx context.Context, l *distlock.Locker, cfg workerConfig, say func(workerMsg)) int {
	f, err := os.OpenFile(cfg.History, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		say(workerMsg{Ev: "error", Err: err.Error()})
		return 1
	}
	defer f.Close()
	// Unbuffered writes outlive a SIGKILL (the kernel has them); no fsync
	// per beat.
	rec := history.NewRecorder(struct{ io.Writer }{f})
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() && sc.Text() != "quit" {
		}
		cancel()
	}()
	if err := runCandidate(ctx, l, cfg.ID, cfg.Key, cfg.TTL, rec, say); err != nil && ctx.Err() == nil {
		say(workerMsg{Ev: "error", Err: oneLineErr(err)})
		return 1
	}
	say(workerMsg{Ev: "finished"})
	return 0
}

// electionRun is the parent's view of candidates campaigning for one key.
type electionRun struct {
	t   T
	h   *Harness
	key string
	dir string
	ttl time.Duration

	msgs    chan candidateMsg
	workers map[string]*worker
	local   map[string]context.CancelFunc // candidates in this process
	wg      sync.WaitGroup
	killed  map[string]int64 // candidate → CLOCK_MONOTONIC of its SIGKILL
}

type candidateMsg struct {
	id string
	workerMsg
}

func newElectionRun(t T, h *Harness, name string) *electionRun {
	needURL(t, h)
	dir, err := os.MkdirTemp("", "distlock-election")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	r := &electionRun{t: t, h: h, key: h.key(t, name), dir: dir, ttl: h.ttl(),
		msgs: make(chan candidateMsg, 256), workers: map[string]*worker{},
		local: map[string]context.CancelFunc{}, killed: map[string]int64{}}
	t.Cleanup(func() {
		for _, stop := range r.local {
			stop()
		}
		r.wg.Wait()
		_ = os.RemoveAll(dir)
	})
	return r
}

func (r *electionRun) history(id string) string { return filepath.Join(r.dir, id+".jsonl") }

// startWorkers starts n candidates in worker processes, named w0, w1, ...
func (r *electionRun) startWorkers(n int) {
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("w%d", len(r.workers))
		w := startWorker(r.t, workerConfig{ID: id, URL: r.h.URL, Key: r.key, Mode: "elect", TTL: r.ttl,
			Duration: 4 * time.Minute, History: r.history(id)})
		r.workers[id] = w
		go func() {
			for m := range w.msgs {
				r.msgs <- candidateMsg{id, m}
			}
		}()
	}
}

// startLocal starts a candidate in this process on l.
func (r *electionRun) startLocal(id string, l *distlock.Locker) {
	f, err := os.Create(r.history(id))
	if err != nil {
		r.t.Fatalf("history: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.local[id] = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer f.Close()
		say := func(m workerMsg) {
			m.At = history.Now()
			r.msgs <- candidateMsg{id, m}
		}
		if err := runCandidate(ctx, l, id, r.key, r.ttl, history.NewRecorder(struct{ io.Writer }{f}), say); err != nil && ctx.Err() == nil {
			say(workerMsg{Ev: "error", Err: oneLineErr(err)})
		}
		say(workerMsg{Ev: "finished"})
	}()
}

// await waits up to d for a message of event ev from a candidate that
// ok accepts; errors of candidates fail the check.
func (r *electionRun) await(ev string, ok func(id string) bool, d time.Duration) (candidateMsg, bool) {
	r.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case m := <-r.msgs:
			if m.Ev == "error" {
				r.t.Fatalf("candidate %s: %s", m.id, m.Err)
			}
			if m.Ev == ev && ok(m.id) {
				return m, true
			}
		case <-timeout:
			return candidateMsg{}, false
		}
	}
}

func anyone(string) bool { return true }

func except(ids ...string) func(string) bool {
	return func(id string) bool {
		for _, x := range ids {
			if id == x {
				return false
			}
		}
		return true
	}
}

func only(id string) func(string) bool { return func(x string) bool { return x == id } }

// kill ends a worker candidate with SIGKILL and returns when it was sent.
func (r *electionRun) kill(id string) int64 {
	at := history.Now()
	if err := r.workers[id].signal(syscall.SIGKILL); err != nil {
		r.t.Fatalf("SIGKILL %s: %v", id, err)
	}
	r.killed[id] = at
	return at
}

// finish stops every candidate still running and checks the history.
func (r *electionRun) finish() {
	r.t.Helper()
	for id, w := range r.workers {
		if _, dead := r.killed[id]; dead {
			continue
		}
		_ = w.signal(syscall.SIGCONT)
		_ = w.send("quit")
	}
	for _, stop := range r.local {
		stop()
	}
	r.wg.Wait()
	for id, w := range r.workers {
		if _, dead := r.killed[id]; dead {
			continue
		}
		if err := w.waitExit(time.Minute); err != nil {
			r.t.Fatalf("candidate %s did not stop: %v", id, err)
		}
	}
	var events []history.Event
	for _, id := range r.ids() {
		f, err := os.Open(r.history(id))
		if err != nil {
			r.t.Fatalf("history of %s: %v", id, err)
		}
		evs, err := history.Read(f)
		f.Close()
		if err != nil {
			r.t.Fatalf("history of %s: %v", id, err)
		}
		// A killed candidate acts no more: its open term ends at the kill
		// (its lease may have no deadline on a session-bound backend).
		if at, dead := r.killed[id]; dead {
			for _, e := range evs {
				if e.Op == history.AcquireOK {
					evs = append(evs, with(e, history.Lost, at, 0))
				}
			}
		}
		events = append(events, evs...)
	}
	checkTerms(r.t, events)
}

func (r *electionRun) ids() []string {
	var ids []string
	for id := range r.workers {
		ids = append(ids, id)
	}
	for id := range r.local {
		ids = append(ids, id)
	}
	return ids
}

// checkTerms checks a recorded election: at most one leader per instant,
// tokens that increase from term to term, no action after a lease's
// deadline.
func checkTerms(t T, events []history.Event) {
	t.Helper()
	terms := history.Holds(events, history.Now())
	if len(terms) == 0 {
		t.Fatalf("no term recorded")
	}
	for _, v := range history.Check(terms) {
		t.Errorf("%s between terms: %v", v.Rule, v)
	}
	for _, b := range history.LateBeats(events, time.Millisecond) {
		t.Errorf("%s#%d acted as leader %v after its lease's deadline", b.Process, b.Seq, time.Duration(b.Time-b.Deadline))
	}
	t.Logf("%d terms checked: at most one leader per instant, increasing tokens, no action past a deadline", len(terms))
}

// failoverBound is how long a leader's death may leave the key leaderless:
// the takeover bound (TTL or session timeout) plus an acquisition and the
// candidates' recampaign backoff, with slack for a loaded machine.
func (r *electionRun) failoverBound(caps distlock.Capabilities) time.Duration {
	return r.h.takeoverBound(caps) + 3*time.Second
}

func checkElectionKill(t T, h *Harness) {
	caps := h.locker(t).Capabilities()
	r := newElectionRun(t, h, "election-kill")
	r.startWorkers(3)
	first, ok := r.await("leader", anyone, time.Minute)
	if !ok {
		t.Fatalf("no leader among 3 candidates within a minute")
	}
	killedAt := r.kill(first.id)
	next, ok := r.await("leader", except(first.id), r.failoverBound(caps)+30*time.Second)
	if !ok {
		t.Fatalf("no new leader after the leader was killed")
	}
	failover := time.Duration(next.At - killedAt)
	t.Logf("failover: leader killed -> new leader acting after %v (TTL %v, takeover bound %v)",
		failover.Round(time.Millisecond), r.ttl, h.takeoverBound(caps))
	if failover > r.failoverBound(caps) {
		t.Errorf("new leader %v after the leader was killed, want within %v", failover, r.failoverBound(caps))
	}
	if caps.Fencing && next.Token <= first.Token {
		t.Errorf("new term's token %d, want above the killed leader's %d", next.Token, first.Token)
	}
	r.finish()
}

func checkElectionPause(t T, h *Harness) {
	caps := h.locker(t).Capabilities()
	r := newElectionRun(t, h, "election-pause")
	r.startWorkers(3)
	first, ok := r.await("leader", anyone, time.Minute)
	if !ok {
		t.Fatalf("no leader among 3 candidates within a minute")
	}
	paused := r.workers[first.id]
	if err := paused.signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	next, ok := r.await("leader", except(first.id), 3*h.takeoverBound(caps)+10*time.Second)
	if err := paused.signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
	if !ok {
		if !caps.Expiring {
			r.finish()
			t.Skipf("documented: a paused leader keeps its session (its connection stays open), so it stays leader — safe, not live")
		}
		t.Fatalf("no new leader while the leader was paused")
	}
	if caps.Fencing && next.Token <= first.Token {
		t.Errorf("new term's token %d, want above the paused leader's %d", next.Token, first.Token)
	}
	if _, ok := r.await("lost", only(first.id), 30*time.Second); !ok {
		t.Errorf("the resumed leader did not see its term end")
	}
	r.finish() // checks it did not act between its deadline and noticing
}

func checkElectionPartition(t T, h *Harness) {
	caps := h.locker(t).Capabilities()
	l, link := needLink(t, h)
	r := newElectionRun(t, h, "election-partition")
	r.startLocal("linked", l)
	if _, ok := r.await("leader", only("linked"), time.Minute); !ok {
		t.Fatalf("the only candidate did not lead within a minute")
	}
	r.startWorkers(2)
	link.Blackhole()
	cut := history.Now()
	next, ok := r.await("leader", except("linked"), 3*h.takeoverBound(caps)+10*time.Second)
	if !ok {
		link.Heal()
		if !caps.Expiring {
			r.finish()
			t.Skipf("documented: the partitioned leader's session outlives this partition (its server never saw it end), so it stays leader — safe, not live")
		}
		t.Fatalf("no new leader during the partition")
	}
	t.Logf("%s leads %v into the partition", next.id, time.Duration(next.At-cut).Round(time.Millisecond))
	link.Heal()
	// The new leaders step down; the healed candidate must lead again.
	for id, w := range r.workers {
		if err := w.send("quit"); err != nil {
			t.Fatalf("quit %s: %v", id, err)
		}
	}
	if _, ok := r.await("leader", only("linked"), time.Minute+h.takeoverBound(caps)); !ok {
		t.Errorf("the partitioned candidate did not lead again after the partition healed")
	}
	r.finish() // the linked candidate's term ended before the next began
}
