package distlock_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/soak"
	"github.com/stretchr/testify/require"
)

// The randomized model checker of the shared machinery (issue 14). Each
// schedule, made from one seed, runs 2 to 4 Lockers over model drivers
// against one model server (modelserver_test.go), each behind its own
// network (modelnet_test.go) that delays requests and replies
// independently, drops replies, partitions, heals and delivers late. Every
// Locker runs two random programs at once (Acquire, TryAcquire, bursts of
// TryAcquire, WithOwner nesting within and across Lockers, manual Refresh
// with random TTLs, auto-refresh on or off, Release, Close, contexts that
// end at random moments) while a third program changes its network. The
// checks, continuously and at the end of every schedule:
//
//   - a lease that says it is held (Err() == nil, Done() open or Context()
//     live) does so before its Deadline(), and the server holds the lock
//     for its owner and token at that instant, until at least that
//     deadline (every live lease is probed in a loop with the server
//     frozen, and the leases of a lock again right after each refresh
//     reply, before the next refresh can reach the server);
//   - every token was granted by the server to the lease's owner, and a
//     lease's token is greater than that of any lease on the key returned
//     before its acquisition began, or equal to it for the same owner
//     (a nested hold keeps its token);
//   - every call returns within modelSlack of the end of its context (as
//     the runtime delivered it), and Close within the release bound plus
//     modelSlack, both plus any stall of the whole process measured
//     meanwhile (modelLag: a loaded CI machine is not a defect);
//   - acquisition errors have their documented classes;
//   - after every Locker is closed and the network healed and quiet,
//     nothing an acquisition left behind remains on the server, no request
//     reaches it any more, every lease has ended, and no goroutine remains.
//
// A failure prints the seed and the schedule's log; -seed N replays that
// schedule (the same programs and networks; the interleaving is the
// runtime's) again and again until it fails or the budget ends.
// -schedules and -modeltime bound a run (make ci: by default three tenths
// of 15 s, which TestModel shares with TestSessionModel and TestNotifyModel
// (modelShare), or 400 schedules, whichever comes first; make soak,
// DISTLOCK_SOAK=1: 10 minutes and no schedule limit unless the flags say
// otherwise).
var (
	modelSeed      = flag.Uint64("seed", 0, "TestModel: run only the schedule with this seed")
	modelSchedules = flag.Int("schedules", 400, "TestModel: the most schedules to run")
	modelTime      = flag.Duration("modeltime", 15*time.Second, "TestModel, TestSessionModel, TestNotifyModel: how long to run schedules, shared among them (a quarter with -short; 10m under make soak)")
)

const (
	modelRelease  = 200 * time.Millisecond // the release bound, shortened for the model
	modelParallel = 3                      // schedules run at once
)

// modelSlack is the scheduling slack allowed to every call (race detector,
// loaded machine), widened by the test kit's slack factor.
var modelSlack = slack.D(400 * time.Millisecond)

// modelBudget is how long a seeded search runs: flagged, a quarter of it
// with -short, and at least 10 minutes under make soak.
func modelBudget(flagged time.Duration) time.Duration {
	switch {
	case soak.Enabled():
		return max(flagged, 10*time.Minute)
	case testing.Short():
		return flagged / 4
	}
	return flagged
}

// scheduleLimit is -schedules, or no limit under make soak unless the flag
// was given.
func scheduleLimit() int {
	if !soak.Enabled() {
		return *modelSchedules
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "schedules" })
	if given {
		return *modelSchedules
	}
	return 1 << 30
}

func TestModel(t *testing.T) {
	defer distlock.SetReleaseTimeout(modelRelease)()
	runSchedules(t, modelShare(3), runSchedule)
}

// modelShare is parts tenths of the model checkers' budget: -modeltime is
// shared by TestModel (three tenths), TestSessionModel (a tenth),
// TestNotifyModel (a tenth: its one batch of schedules, seconds each,
// outlasts it), TestSessionModelFindsOldJoin and
// TestWaitRewatchesAfterChannelHeal, so that together they run within it.
// Under make soak each runs the whole budget.
func modelShare(parts int) time.Duration {
	if soak.Enabled() {
		return modelBudget(*modelTime)
	}
	return modelBudget(*modelTime) * time.Duration(parts) / 10
}

// runSchedules runs run's schedules until -schedules of them ran or budget
// passed: modelParallel at once from a seed taken from the clock, or with
// -seed that one again and again. After each batch the goroutines must be
// back to their number before it. run returns "" or the report of its
// violations.
func runSchedules(t *testing.T, budget time.Duration, run func(seed uint64) string) {
	if *modelSeed != 0 {
		// The same programs and networks each time; the interleaving,
		// which decides whether a timing window is hit, varies.
		start := time.Now()
		n := 0
		for ; n < scheduleLimit() && time.Since(start) < budget; n++ {
			goroutines := runtime.NumGoroutine()
			require.Empty(t, run(*modelSeed), "replay %d", n+1)
			require.Empty(t, goroutinesBack(goroutines), "replay %d", n+1)
		}
		t.Logf("seed %d replayed %d times without a violation", *modelSeed, n)
		return
	}
	base := uint64(time.Now().UnixNano())
	start := time.Now()
	n := 0
	limit := scheduleLimit()
	for n < limit && time.Since(start) < budget {
		// A few schedules at once: they mostly wait on the network.
		batch := min(modelParallel, limit-n)
		goroutines := runtime.NumGoroutine()
		res := make([]string, batch)
		var wg sync.WaitGroup
		for i := range batch {
			wg.Add(1)
			go func() { defer wg.Done(); res[i] = run(base + uint64(n+i)) }()
		}
		wg.Wait()
		for i, msg := range res {
			require.Empty(t, msg, "schedule %d of this run (%d schedules before its batch of %d passed)", n+i+1, n, batch)
		}
		require.Empty(t, goroutinesBack(goroutines), "schedules %d to %d (seeds %d to %d)", n, n+batch-1, base+uint64(n), base+uint64(n+batch-1))
		n += batch
	}
	t.Logf("%d schedules in %v without a violation (seeds %d to %d)", n, time.Since(start).Round(time.Millisecond), base, base+uint64(n)-1)
}

// modelRun is one schedule.
type modelRun struct {
	seed    uint64
	srv     *modelServer
	clients []*modelClient

	modelTrace
	leases   map[*distlock.Lease]time.Time // every lease → when returned
	live     map[*distlock.Lease]bool      // leases not seen ended yet
	lag      modelLag
	returned map[string][]modelReturn // per key, leases in order of return
	calls    map[*modelCall]bool      // calls under way
}

type modelReturn struct {
	at    time.Time
	owner string
	token uint64
}

type modelClient struct {
	idx  int
	link *modelLink
	drv  *modelDriver
	l    *distlock.Locker

	mu     sync.Mutex
	leases []*distlock.Lease
	closed bool
}

type modelCall struct {
	what  string
	start time.Time
	limit time.Time // when it must have returned, slack included
	late  bool
	stop  func() bool // stops the ctx watch
}

func (r *modelRun) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.violations) > 0
}

// begin registers a call that must return within bound (slack added).
// If ctx is not nil, the bound runs from the moment ctx ends as the
// runtime delivers it, if that is later than start + bound: a late timer is
// not the call's fault.
func (r *modelRun) begin(what string, ctx context.Context, bound time.Duration) *modelCall {
	c := &modelCall{what: what, start: time.Now()}
	c.limit = c.start.Add(bound + modelSlack)
	if ctx != nil {
		c.stop = context.AfterFunc(ctx, func() {
			r.mu.Lock()
			if ended := time.Now().Add(modelSlack); ended.After(c.limit) {
				c.limit = ended
			}
			r.mu.Unlock()
		})
	}
	r.mu.Lock()
	r.calls[c] = true
	r.mu.Unlock()
	return c
}

func (r *modelRun) end(c *modelCall) {
	now := time.Now()
	if c.stop != nil {
		c.stop()
	}
	r.mu.Lock()
	delete(r.calls, c)
	late, limit := c.late, c.limit
	r.mu.Unlock()
	if lag := r.lag.stalled(c.start, now); now.After(limit.Add(lag)) && !late {
		r.violate("%s returned after %v, %v past its bound plus slack (the process stalled %v meanwhile)", c.what, now.Sub(c.start).Round(time.Millisecond), now.Sub(limit).Round(time.Millisecond), lag.Round(time.Millisecond))
	}
}

// watchCalls reports calls still under way past their bound, until stop.
func (r *modelRun) watchCalls(stop <-chan struct{}) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			var late []*modelCall
			r.mu.Lock()
			for c := range r.calls {
				if !c.late && now.After(c.limit.Add(time.Second)) && now.After(c.limit.Add(time.Second+r.lag.stalled(c.start, now))) {
					c.late = true
					late = append(late, c)
				}
			}
			r.mu.Unlock()
			for _, c := range late {
				r.violate("%s still under way %v after it began, past its bound", c.what, now.Sub(c.start).Round(time.Millisecond))
			}
		}
	}
}

// modelTTL draws a TTL: mostly a few hundred ms, sometimes seconds, and
// sometimes the smallest TTLs, including the one whose refresh time meets
// its deadline.
func modelTTL(rng *rand.Rand) time.Duration {
	switch x := rng.IntN(100); {
	case x < 55:
		return 100*time.Millisecond + time.Duration(rng.Int64N(int64(500*time.Millisecond)))
	case x < 75:
		return 600*time.Millisecond + time.Duration(rng.Int64N(int64(1400*time.Millisecond)))
	case x < 85:
		return 20*time.Millisecond + time.Duration(rng.Int64N(int64(80*time.Millisecond)))
	case x < 92:
		return 3045683 * time.Nanosecond
	default:
		return 2100*time.Microsecond + time.Duration(rng.Int64N(int64(3*time.Millisecond)))
	}
}

// modelCtx returns a context that ends at a random moment (a deadline or a
// cancel), with the time by which it has certainly ended.
func modelCtx(rng *rand.Rand) (context.Context, context.CancelFunc, time.Duration) {
	d := 5*time.Millisecond + time.Duration(rng.Int64N(int64(400*time.Millisecond)))
	if rng.IntN(2) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		return ctx, cancel, d
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := time.AfterFunc(d, cancel)
	return ctx, func() { t.Stop(); cancel() }, d
}

var modelKeys = []string{"k0", "k1", "k2"}

// goroutinesBack waits up to 3s for the goroutines to be no more than
// before, and otherwise returns their stacks.
//
// Past 3 s it waits on, up to 30 s, while a goroutine of distlock's is
// still runnable or waiting for a mutex: Close is bounded and leaves a
// refresh worker or a release to finish on its own, which a starved
// process (the race detector, a loaded machine) runs late; a leaked
// goroutine is parked, and is reported at 3 s.
func goroutinesBack(before int) string {
	start := time.Now()
	for runtime.NumGoroutine() > before {
		if since := time.Since(start); since > 3*time.Second {
			buf := make([]byte, 1<<20)
			stacks := string(buf[:runtime.Stack(buf, true)])
			if since > 30*time.Second || !distlockRunnable(stacks) {
				return fmt.Sprintf("%d goroutines remain after the schedules, %d before (waited %v):\n%s", runtime.NumGoroutine(), before, since.Round(time.Millisecond), stacks)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return ""
}

// distlockRunnable reports whether a goroutine in stacks (runtime.Stack of
// all) is in distlock's code and runnable, running or waiting for a mutex:
// making progress, not parked.
func distlockRunnable(stacks string) bool {
	for _, g := range strings.Split(stacks, "\n\n") {
		header, body, _ := strings.Cut(g, "\n")
		busy := strings.Contains(header, "[runnable") || strings.Contains(header, "[running") || strings.Contains(header, "[sync.Mutex.Lock") || strings.Contains(header, "[semacquire")
		if busy && strings.Contains(body, "github.com/distlock/distlock.") {
			return true
		}
	}
	return false
}

// runSchedule runs the schedule of seed and returns "" or the report of its
// violations with the schedule's log.
func runSchedule(seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 14))
	r := &modelRun{
		seed:       seed,
		srv:        newModelServer(),
		modelTrace: modelTrace{start: time.Now()},
		leases:     map[*distlock.Lease]time.Time{},
		live:       map[*distlock.Lease]bool{},
		returned:   map[string][]modelReturn{},
		calls:      map[*modelCall]bool{},
	}
	nClients := 2 + rng.IntN(3)
	for i := range nClients {
		link := &modelLink{rng: rand.New(rand.NewPCG(seed, uint64(100+i)))}
		drv := newModelDriver(r.srv, link)
		drv.onReply = r.probeSoon
		var d backend.Driver = drv
		batch := rng.IntN(2) == 0
		if batch {
			d = modelBatchDriver{drv}
		}
		c := &modelClient{idx: i, link: link, drv: drv, l: distlock.New(d, "model")}
		r.clients = append(r.clients, c)
		r.logf("client %d: batch refresh %v", i, batch)
	}
	stop := make(chan struct{})
	var watchers sync.WaitGroup
	watchers.Add(2)
	go func() { defer watchers.Done(); r.watchCalls(stop) }()
	go func() { defer watchers.Done(); r.probe(stop) }()
	watchers.Add(1)
	go func() { defer watchers.Done(); r.lag.measure(stop) }()

	var programs, networks sync.WaitGroup
	programsDone := make(chan struct{})
	for _, c := range r.clients {
		for th := range 2 {
			prng := rand.New(rand.NewPCG(seed, uint64(1000+10*c.idx+th)))
			programs.Add(1)
			go func() { defer programs.Done(); r.program(c, th, prng) }()
		}
		nrng := rand.New(rand.NewPCG(seed, uint64(2000+c.idx)))
		networks.Add(1)
		go func() { defer networks.Done(); r.network(c, nrng, programsDone) }()
	}
	if !r.waitPrograms(&programs) {
		close(stop)
		return r.report() // a call is stuck: leave it (the test fails)
	}
	close(programsDone)
	networks.Wait()
	r.logf("programs done")
	r.finish(stop, &watchers)
	return r.report()
}

// finish closes every Locker, heals the network, waits for it to go
// quiet and runs the final checks.
func (r *modelRun) finish(stop chan struct{}, watchers *sync.WaitGroup) {
	for _, c := range r.clients {
		r.closeClient(c)
	}
	for _, c := range r.clients {
		c.link.setNet(0, 0, 0)
		c.link.partition(false)
	}
	quiet := time.Now().Add(5 * time.Second)
	for {
		busy := 0
		for _, c := range r.clients {
			busy += int(c.link.pending.Load() + c.drv.undos.Load())
		}
		if busy == 0 {
			break
		}
		if time.Now().After(quiet) {
			r.violate("network not quiet 5s after healing: %d messages or undos under way", busy)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.logf("quiet")
	close(stop)
	watchers.Wait()
	orphans := map[uint64]string{}
	for _, c := range r.clients {
		for h, why := range c.drv.orphans() {
			orphans[h] = why
		}
	}
	for _, left := range r.srv.seal(orphans) {
		r.violate("left on the server after cleanup: %s", left)
	}
	r.mu.Lock()
	leases := make([]*distlock.Lease, 0, len(r.leases))
	for ls := range r.leases {
		leases = append(leases, ls)
	}
	r.mu.Unlock()
	for _, ls := range leases {
		if ls.Err() == nil {
			r.violate("lease %s of %s still held after its Locker closed", ls.Key(), ls.Owner())
		}
	}
	r.srv.mu.Lock()
	late := r.srv.late
	r.srv.mu.Unlock()
	if len(late) > 0 {
		r.violate("requests reached the server after every Locker closed: %s", strings.Join(late, "; "))
	}
}

func (r *modelRun) report() string {
	return r.modelTrace.report("model", r.seed, fmt.Sprintf("go test -run 'TestModel$' -seed %d .", r.seed))
}

// waitPrograms waits for the programs to end, and reports false if a call
// got stuck instead (watchCalls reported it) or they ran for 30s.
func (r *modelRun) waitPrograms(wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	limit := time.After(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return true
		case <-limit:
			r.violate("programs still running 30s after the start")
			return false
		case <-tick.C:
			r.mu.Lock()
			stuck := false
			for c := range r.calls {
				stuck = stuck || c.late
			}
			r.mu.Unlock()
			if stuck {
				return false
			}
		}
	}
}

// network is a Locker's network program: new delays and losses, and
// partitions that heal.
func (r *modelRun) network(c *modelClient, rng *rand.Rand, done <-chan struct{}) {
	delays := []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 30 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond}
	drops := []float64{0, 0, 0.1, 0.5}
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-done:
			return false
		}
	}
	for sleep(time.Duration(rng.Int64N(int64(100 * time.Millisecond)))) {
		if rng.IntN(4) == 0 {
			d := 20*time.Millisecond + time.Duration(rng.Int64N(int64(400*time.Millisecond)))
			r.logf("c%d partitioned for %v", c.idx, d.Round(time.Millisecond))
			c.link.partition(true)
			sleep(d)
			c.link.partition(false)
			r.logf("c%d healed", c.idx)
			continue
		}
		req, reply, drop := delays[rng.IntN(len(delays))], delays[rng.IntN(len(delays))], drops[rng.IntN(len(drops))]
		c.link.setNet(req, reply, drop)
		r.logf("c%d network: requests up to %v, replies up to %v, %.0f%% replies lost", c.idx, req, reply, drop*100)
	}
	c.link.setNet(0, 0, 0)
}

// program runs one random program on a Locker.
func (r *modelRun) program(c *modelClient, th int, rng *rand.Rand) {
	name := fmt.Sprintf("c%d.%d", c.idx, th)
	for range 6 + rng.IntN(10) {
		time.Sleep(time.Duration(rng.Int64N(int64(30 * time.Millisecond))))
		switch x := rng.IntN(100); {
		case x < 25:
			r.acquire(c, name, rng, modelKeys[rng.IntN(len(modelKeys))], rng.IntN(3) != 0)
		case x < 32:
			r.burst(c, name, rng)
		case x < 50:
			r.refresh(c, name, rng, nil)
		case x < 70:
			r.work(c, name, rng)
		case x < 98:
			r.release(c, name, rng, nil)
		default:
			r.closeClient(c)
		}
	}
}

// acquireOpts draws an acquisition's options.
func acquireOpts(c *modelClient, rng *rand.Rand) ([]distlock.Option, string) {
	ttl := modelTTL(rng)
	opts := []distlock.Option{distlock.WithTTL(ttl)}
	desc := fmt.Sprintf("ttl %v", ttl)
	switch rng.IntN(10) {
	case 0, 1, 2:
		opts = append(opts, distlock.WithOwner(fmt.Sprintf("c%d", c.idx)))
		desc += fmt.Sprintf(" owner c%d", c.idx)
	case 3, 4:
		opts = append(opts, distlock.WithOwner("shared"))
		desc += " owner shared"
	}
	if rng.IntN(7) == 0 {
		opts = append(opts, distlock.WithAutoRefresh(false))
		desc += " no auto-refresh"
	}
	return opts, desc
}

func (r *modelRun) acquire(c *modelClient, name string, rng *rand.Rand, key string, wait bool) *distlock.Lease {
	opts, desc := acquireOpts(c, rng)
	ctx, cancel, bound := modelCtx(rng)
	defer cancel()
	op := "TryAcquire"
	if wait {
		op = "Acquire"
	}
	what := fmt.Sprintf("%s %s %s %s ctx %v", name, op, key, desc, bound.Round(time.Millisecond))
	call := r.begin(what, ctx, bound)
	began := time.Now()
	var (
		ls  *distlock.Lease
		err error
	)
	if wait {
		ls, err = c.l.Acquire(ctx, key, opts...)
	} else {
		ls, err = c.l.TryAcquire(ctx, key, opts...)
	}
	r.end(call)
	r.acquired(c, what, ctx, ls, err, began)
	return ls
}

// burst acquires many keys at once with one TTL, so that many leases share
// their schedule.
func (r *modelRun) burst(c *modelClient, name string, rng *rand.Rand) {
	opts, desc := acquireOpts(c, rng)
	n := 2 + rng.IntN(40)
	r.logf("%s burst of %d: %s", name, n, desc)
	var wg sync.WaitGroup
	for i := range n {
		ctx, cancel, bound := modelCtx(rng)
		key := fmt.Sprintf("b%s-%d", name, i)
		what := fmt.Sprintf("%s TryAcquire %s %s ctx %v", name, key, desc, bound.Round(time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			call := r.begin(what, ctx, bound)
			began := time.Now()
			ls, err := c.l.TryAcquire(ctx, key, opts...)
			r.end(call)
			r.acquired(c, what, ctx, ls, err, began)
		}()
	}
	wg.Wait()
}

// acquired checks an acquisition's result and records its lease.
func (r *modelRun) acquired(c *modelClient, what string, ctx context.Context, ls *distlock.Lease, err error, began time.Time) {
	if err != nil {
		switch {
		case (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && (!errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, ctx.Err())):
			r.violate("%s: error for an ended ctx is not both ErrNotAcquired and the ctx's error: %v", what, err)
		case !errors.Is(err, distlock.ErrNotAcquired) && !errors.Is(err, distlock.ErrUnavailable) && !errors.Is(err, distlock.ErrClosed):
			r.violate("%s: error of no documented class: %v", what, err)
		}
		r.logf("%s -> %v", what, err)
		return
	}
	key, owner, token := ls.Key(), ls.Owner(), ls.Token()
	now := time.Now()
	r.srv.mu.Lock()
	granted := r.srv.granted(key, token, owner)
	r.srv.mu.Unlock()
	if !granted {
		r.violate("%s: token %d was never granted to %s on %s", what, token, owner, key)
	}
	r.mu.Lock()
	for _, prev := range r.returned[key] {
		if prev.at.Before(began) && token <= prev.token && !(token == prev.token && owner == prev.owner) {
			r.mu.Unlock()
			r.violate("%s: token %d not above token %d of %s, returned before this acquisition began", what, token, prev.token, prev.owner)
			r.mu.Lock()
		}
	}
	r.returned[key] = append(r.returned[key], modelReturn{at: now, owner: owner, token: token})
	r.leases[ls] = now
	r.live[ls] = true
	r.mu.Unlock()
	c.mu.Lock()
	c.leases = append(c.leases, ls)
	c.mu.Unlock()
	r.logf("%s -> token %d, deadline in %v", what, token, time.Until(ls.Deadline()).Round(time.Millisecond))
}

// pick returns one of the client's leases, a held one if it finds one in
// a few draws, or nil.
func (c *modelClient) pick(rng *rand.Rand) *distlock.Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.leases) == 0 {
		return nil
	}
	ls := c.leases[rng.IntN(len(c.leases))]
	for range 3 {
		if ls.Err() == nil {
			break
		}
		ls = c.leases[rng.IntN(len(c.leases))]
	}
	return ls
}

// work acquires a lock and works under it a while, extending it by
// manual refreshes (with TTLs longer and shorter than its own) on top of
// the automatic ones, then releases it or not.
func (r *modelRun) work(c *modelClient, name string, rng *rand.Rand) {
	key := modelKeys[rng.IntN(len(modelKeys))]
	ls := r.acquire(c, name, rng, key, true)
	if ls == nil {
		return
	}
	for range 2 + rng.IntN(5) {
		time.Sleep(time.Duration(rng.Int64N(int64(50 * time.Millisecond))))
		r.refresh(c, name, rng, ls)
	}
	if rng.IntN(4) != 0 {
		r.release(c, name, rng, ls)
	}
}

// refresh refreshes ls, or one of the client's leases if nil.
func (r *modelRun) refresh(c *modelClient, name string, rng *rand.Rand, ls *distlock.Lease) {
	if ls == nil {
		ls = c.pick(rng)
	}
	if ls == nil {
		return
	}
	ttl := modelTTL(rng)
	if rng.IntN(2) == 0 {
		ttl = 2*time.Second + time.Duration(rng.Int64N(int64(3*time.Second)))
	}
	ctx, cancel, bound := modelCtx(rng)
	defer cancel()
	what := fmt.Sprintf("%s Refresh %s token %d ttl %v ctx %v", name, ls.Key(), ls.Token(), ttl, bound.Round(time.Millisecond))
	call := r.begin(what, ctx, bound)
	err := ls.Refresh(ctx, ttl)
	r.end(call)
	if err != nil && !errors.Is(err, distlock.ErrNotHeld) && !errors.Is(err, distlock.ErrUnavailable) && !errors.Is(err, distlock.ErrInvalidTTL) {
		r.violate("%s: error of no documented class: %v", what, err)
	}
	r.logf("%s -> %v", what, err)
}

// release releases ls, or one of the client's leases if nil.
func (r *modelRun) release(c *modelClient, name string, rng *rand.Rand, ls *distlock.Lease) {
	if ls == nil {
		ls = c.pick(rng)
	}
	if ls == nil {
		return
	}
	c.mu.Lock()
	for i, x := range c.leases {
		if x == ls {
			c.leases = append(c.leases[:i], c.leases[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	ctx, cancel, bound := modelCtx(rng)
	defer cancel()
	what := fmt.Sprintf("%s Release %s token %d ctx %v", name, ls.Key(), ls.Token(), bound.Round(time.Millisecond))
	call := r.begin(what, ctx, bound)
	err := ls.Release(ctx)
	r.end(call)
	if err != nil && !errors.Is(err, distlock.ErrNotHeld) && !errors.Is(err, distlock.ErrUnavailable) {
		r.violate("%s: error of no documented class: %v", what, err)
	}
	if ls.Err() == nil {
		r.violate("%s: lease still held after Release", what)
	}
	r.logf("%s -> %v", what, err)
}

func (r *modelRun) closeClient(c *modelClient) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	what := fmt.Sprintf("c%d Close", c.idx)
	call := r.begin(what, nil, modelRelease)
	err := c.l.Close()
	r.end(call)
	r.logf("%s -> %v", what, err)
}

// probe looks at every live lease again and again, and checks each that
// says it is held against its deadline and against the server, with the
// server frozen meanwhile.
func (r *modelRun) probe(stop <-chan struct{}) {
	for kind := 0; ; kind++ {
		select {
		case <-stop:
			return
		default:
		}
		r.mu.Lock()
		leases := make([]*distlock.Lease, 0, len(r.live))
		for ls := range r.live {
			leases = append(leases, ls)
		}
		r.mu.Unlock()
		soon := false
		for _, ls := range leases {
			if r.probeOne(ls, kind) {
				soon = soon || time.Until(ls.Deadline()) < 5*time.Millisecond
			} else if ls.Err() != nil {
				r.mu.Lock()
				delete(r.live, ls)
				r.mu.Unlock()
			}
		}
		if !soon {
			time.Sleep(time.Millisecond)
		}
	}
}

// probeSoon probes the leases of key with token a few times in the next
// milliseconds: right after a refresh returns, when its lease's deadline
// moves and before the next refresh can reach the server.
func (r *modelRun) probeSoon(key string, token uint64) {
	for _, after := range []time.Duration{100 * time.Microsecond, time.Millisecond, 3 * time.Millisecond} {
		time.AfterFunc(after, func() {
			r.mu.Lock()
			var leases []*distlock.Lease
			for ls := range r.live {
				if ls.Key() == key && ls.Token() == token {
					leases = append(leases, ls)
				}
			}
			r.mu.Unlock()
			for _, ls := range leases {
				r.probeOne(ls, 0)
			}
		})
	}
}

// probeOne checks one lease and reports whether it said it was held.
func (r *modelRun) probeOne(ls *distlock.Lease, kind int) bool {
	r.srv.mu.Lock()
	defer r.srv.mu.Unlock()
	at := time.Now()
	var held bool
	switch kind % 3 {
	case 0:
		held = ls.Err() == nil
	case 1:
		select {
		case <-ls.Done():
		default:
			held = true
		}
	default:
		held = ls.Context().Err() == nil
	}
	if !held {
		return false
	}
	deadline := ls.Deadline()
	key, owner, token := ls.Key(), ls.Owner(), ls.Token()
	k := r.srv.keys[key]
	switch {
	case !at.Before(deadline):
		r.violate("lease %s token %d of %s says held %v after its deadline", key, token, owner, at.Sub(deadline))
	case k == nil || !at.Before(k.expires) || len(k.holds) == 0:
		r.violate("lease %s token %d of %s says held (deadline in %v) but the server has freed the lock", key, token, owner, deadline.Sub(at))
	case k.owner != owner || k.token != token:
		r.violate("lease %s token %d of %s says held (deadline in %v) but the server has it for %s with token %d", key, token, owner, deadline.Sub(at), k.owner, k.token)
	case deadline.After(k.expires):
		r.violate("lease %s token %d of %s has its deadline %v after the server's expiry", key, token, owner, deadline.Sub(k.expires))
	}
	return true
}

// modelLag measures how late timers fire (the machine's load, the race
// detector), so that a call is not blamed for the runtime's delays: a call
// may overrun its bound by the slack plus the stalls measured while it ran.
type modelLag struct {
	mu     sync.Mutex
	last   time.Time   // the last sample
	stalls []lagSample // samples later than lagJitter, in order
}

type lagSample struct {
	at  time.Time
	lag time.Duration
}

const lagTick = 2 * time.Millisecond

func (g *modelLag) measure(stop <-chan struct{}) {
	t := time.NewTimer(lagTick)
	defer t.Stop()
	for {
		start := time.Now()
		select {
		case <-stop:
			return
		case now := <-t.C:
			lag := time.Since(start) - lagTick
			g.mu.Lock()
			g.last = now
			if lag > lagJitter {
				g.stalls = append(g.stalls, lagSample{now, lag})
			}
			g.mu.Unlock()
			t.Reset(lagTick)
		}
	}
}

// stalled returns how long the process stalled between from and to: the
// sum of the lags above lagJitter measured then, and the delay of the
// sampler itself if it is late at to. (One stall may be measured in
// parts; ordinary jitter is not counted.)
func (g *modelLag) stalled(from, to time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	sum := time.Duration(0)
	for i := len(g.stalls) - 1; i >= 0 && !g.stalls[i].at.Before(from); i-- {
		sum += g.stalls[i].lag
	}
	if !g.last.IsZero() && g.last.Before(to) {
		if late := time.Since(g.last) - lagTick; late > lagJitter {
			sum += late // the sampler itself is late now
		}
	}
	return sum
}

// lagJitter is the timer lateness taken as ordinary jitter, not a stall.
const lagJitter = 3 * time.Millisecond
