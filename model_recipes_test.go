package distlock_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/memory"
)

// The seeded model checker of the recipes built on the lock: TestModel's
// sibling, over mem:// (the recipes' own logic is what it checks; the
// network and the SPI are TestModel's). Each schedule, made from one seed,
// runs 2 or 3 Lockers on one fresh namespace and 3 to 5 random programs at
// once, each a sequence of: AcquireAll or TryAcquireAll of 1 to 3 of 4
// keys; a permit of one Semaphore of 1 to 3 permits; Election.Lead; and
// Campaign then Resign. Any of them with WithMinHold or without, random
// TTLs and auto-refresh, contexts that end after a random time, already
// ended, or at a chosen await of the call (an Observer cancels the ctx at
// the k-th AcquireStart or AcquireEnd it sees: before or right after any
// member's or term's grant). One Election.Observe runs throughout. Checks:
//
//   - all or nothing: after AcquireAll or TryAcquireAll failed, no member
//     lease it was granted (its owner, from AcquireEnd) holds its key;
//     after it succeeded, every key is held by its member;
//   - WithMinHold is kept only by a hold whose work ran: a Lead term whose
//     fn did not run holds nothing once Lead returns; a MultiLease or term
//     released within its minimum hold keeps its keys until it ends;
//   - Semaphore: at no instant do more than n permits report Err() == nil;
//   - Election: at no instant do two terms report Err() == nil;
//   - Observe converges: once the programs are done, the observer's last
//     report names the leader the backend has (or nobody);
//   - after every Locker closed, no goroutine remains.
//
// A failure prints the seed and the schedule's log; -seed N replays that
// schedule's programs (the interleaving is the runtime's) until it fails or
// the budget ends. -recipetime bounds a run (default a few seconds), as
// -schedules does.
var recipeTime = flag.Duration("recipetime", 3*time.Second, "TestRecipeModel: how long to run schedules")

func TestRecipeModel(t *testing.T) {
	defer distlock.SetReleaseTimeout(modelRelease)()
	runSchedules(t, modelBudget(*recipeTime), runRecipeSchedule)
}

// recipeRun is one schedule.
type recipeRun struct {
	seed    uint64
	lockers []*distlock.Locker
	permits int

	modelTrace
	permitsOut []*distlock.Lease // permits handed out (ended ones are pruned)
	termsOut   []*distlock.Term  // terms handed out (ended ones are pruned)
}

var recipeNames atomic.Int64

func runRecipeSchedule(seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 15))
	r := &recipeRun{seed: seed, modelTrace: modelTrace{start: time.Now()}, permits: 1 + rng.IntN(3)}
	url := fmt.Sprintf("mem://recipes-%d-%d", seed, recipeNames.Add(1))
	for range 2 + rng.IntN(2) {
		l, err := distlock.Open(context.Background(), url)
		if err != nil {
			return fmt.Sprintf("seed %d: Open: %v", seed, err)
		}
		r.lockers = append(r.lockers, l)
	}
	// The observer: the latest report of one Observe, throughout.
	oe, err := distlock.NewElection(r.lockers[0], "leader", "observer", distlock.WithObserveInterval(10*time.Millisecond))
	if err != nil {
		return fmt.Sprintf("seed %d: NewElection: %v", seed, err)
	}
	obsCtx, stopObs := context.WithCancel(context.Background())
	defer stopObs()
	var seen atomic.Pointer[distlock.LockInfo]
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		for info := range oe.Observe(obsCtx) {
			seen.Store(&info)
		}
	}()
	nProgs := 3 + rng.IntN(3)
	var wg sync.WaitGroup
	for p := range nProgs {
		prng := rand.New(rand.NewPCG(seed, uint64(100+p)))
		l := r.lockers[prng.IntN(len(r.lockers))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 + prng.IntN(6) {
				r.step(fmt.Sprintf("p%d.%d", p, i), l, prng)
			}
		}()
	}
	wg.Wait()
	r.checkObserver(oe, &seen)
	stopObs()
	<-observed
	for _, l := range r.lockers {
		_ = l.Close()
	}
	return r.report("recipe model", seed, fmt.Sprintf("go test -run TestRecipeModel -seed %d .", seed))
}

// step runs one random operation of a program.
func (r *recipeRun) step(name string, l *distlock.Locker, rng *rand.Rand) {
	opts, minHold := recipeOptions(rng)
	ctx, cancel, how := recipeCtx(rng)
	defer cancel()
	// cancelAt: the await of the call at which its ctx ends (an Observer
	// event index), or never.
	obs := &grantLog{cancelAt: -1, cancel: cancel}
	if rng.IntN(2) == 0 {
		obs.cancelAt = rng.IntN(6)
		how += fmt.Sprintf(", ends at await %d", obs.cancelAt)
	}
	opts = append(opts, distlock.WithObserver(obs))
	switch op := rng.IntN(4); op {
	case 0:
		r.multi(ctx, name, l, rng, opts, minHold, how, obs)
	case 1:
		r.permit(ctx, name, l, rng, opts, how)
	case 2:
		r.lead(ctx, name, l, rng, opts, minHold, how, obs)
	case 3:
		r.campaign(ctx, name, l, rng, opts, minHold, how, obs)
	}
}

// recipeOptions draws acquisition options: TTL, auto-refresh, minimum hold.
func recipeOptions(rng *rand.Rand) ([]distlock.Option, time.Duration) {
	opts := []distlock.Option{distlock.WithTTL(time.Duration(100+rng.IntN(400)) * time.Millisecond), distlock.WithAutoRefresh(rng.IntN(4) != 0)}
	var minHold time.Duration
	if rng.IntN(2) == 0 {
		minHold = time.Duration(40+rng.IntN(120)) * time.Millisecond
		opts = append(opts, distlock.WithMinHold(minHold))
	}
	return opts, minHold
}

// recipeCtx draws the call's ctx: no end, ended already, or a timeout.
func recipeCtx(rng *rand.Rand) (context.Context, context.CancelFunc, string) {
	switch rng.IntN(4) {
	case 0:
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx, cancel, "ctx ended"
	case 1:
		d := time.Duration(rng.IntN(30)) * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), d)
		return ctx, cancel, fmt.Sprintf("ctx %v", d)
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		return ctx, cancel, "ctx 2s"
	}
}

// grantLog is an Observer that records the grants of a call (key and
// owner) and ends the call's ctx at its cancelAt-th AcquireStart or
// AcquireEnd.
type grantLog struct {
	distlock.NopObserver
	cancelAt int
	cancel   context.CancelFunc

	mu     sync.Mutex
	events int
	starts map[string]time.Time // key → its latest AcquireStart
	grants []grant
}

// grant is a lease granted: key, owner, and a moment before the grant (its
// acquisition's start): time.Since(at) bounds the time since the grant
// from above.
type grant struct {
	key, owner string
	at         time.Time
}

func (g *grantLog) tick() {
	g.mu.Lock()
	n := g.events
	g.events++
	g.mu.Unlock()
	if n == g.cancelAt {
		g.cancel()
	}
}

func (g *grantLog) AcquireStart(ctx context.Context, e distlock.AcquireEvent) context.Context {
	g.mu.Lock()
	if g.starts == nil {
		g.starts = map[string]time.Time{}
	}
	g.starts[e.Key] = time.Now()
	g.mu.Unlock()
	g.tick()
	return ctx
}

func (g *grantLog) AcquireEnd(_ context.Context, res distlock.AcquireResult) {
	if res.Err == nil {
		g.mu.Lock()
		g.grants = append(g.grants, grant{res.Key, res.Owner, g.starts[res.Key]})
		g.mu.Unlock()
	}
	g.tick()
}

func (g *grantLog) granted() []grant {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]grant(nil), g.grants...)
}

// members returns the grants of leases.
func members(gs []grant, leases []*distlock.Lease) []grant {
	var out []grant
	for _, ls := range leases {
		for _, g := range gs {
			if g.owner == ls.Owner() && g.key == ls.Key() {
				out = append(out, g)
			}
		}
	}
	return out
}

// heldBy reports whether key is held by owner now.
func heldBy(l *distlock.Locker, key, owner string) bool {
	info, err := l.Inspect(context.Background(), key)
	return err == nil && info.Held && info.Owner == owner
}

// work sleeps a random moment, or until ctx ends.
func work(ctx context.Context, rng *rand.Rand) {
	t := time.NewTimer(time.Duration(rng.IntN(15)) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// keptWithinMinHold checks, right after a release within a minimum hold, that the
// hold's keys stay taken by their members until it ends.
func (r *recipeRun) keptWithinMinHold(name string, l *distlock.Locker, minHold time.Duration, gs []grant) {
	for _, g := range gs {
		kept := heldBy(l, g.key, g.owner)
		if since := time.Since(g.at); !kept && since < minHold {
			r.violate("%s: %s released within its minimum hold %v (at most %v after the grant) is free: the hold whose work ran was not kept", name, g.key, minHold, since.Round(time.Millisecond))
		}
	}
}

func (r *recipeRun) multi(ctx context.Context, name string, l *distlock.Locker, rng *rand.Rand, opts []distlock.Option, minHold time.Duration, how string, obs *grantLog) {
	keys := []string{"k0", "k1", "k2", "k3"}
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	keys = keys[:1+rng.IntN(3)]
	try := rng.IntN(2) == 0
	op := "AcquireAll"
	if try {
		op = "TryAcquireAll"
	}
	r.logf("%s: %s %v minHold %v (%s)", name, op, keys, minHold, how)
	var (
		m   *distlock.MultiLease
		err error
	)
	if try {
		m, err = l.TryAcquireAll(ctx, keys, opts...)
	} else {
		m, err = l.AcquireAll(ctx, keys, opts...)
	}
	gs := obs.granted()
	if err != nil {
		r.logf("%s: %s failed after %d grants: %v", name, op, len(gs), err)
		for _, g := range gs {
			if heldBy(l, g.key, g.owner) {
				r.violate("%s: %s failed (%v) yet its member %s (owner %s, minHold %v) still holds the key: not all or nothing", name, op, err, g.key, g.owner, minHold)
			}
		}
		return
	}
	if m.Err() == nil {
		for _, ls := range m.Leases() {
			if !heldBy(l, ls.Key(), ls.Owner()) && ls.Err() == nil {
				r.violate("%s: %s returned, member %s reports held but the backend does not hold it", name, op, ls.Key())
			}
		}
	}
	work(m.Context(), rng)
	err = m.Release(context.Background())
	r.logf("%s: %s released: %v", name, op, err)
	if err == nil && minHold > 0 {
		r.keptWithinMinHold(name, l, minHold, members(gs, m.Leases()))
	}
}

func (r *recipeRun) permit(ctx context.Context, name string, l *distlock.Locker, rng *rand.Rand, opts []distlock.Option, how string) {
	s, err := l.Semaphore("sem", r.permits)
	if err != nil {
		r.violate("%s: Semaphore: %v", name, err)
		return
	}
	try := rng.IntN(2) == 0
	r.logf("%s: permit of %d, try %v (%s)", name, r.permits, try, how)
	var p *distlock.Lease
	if try {
		p, err = s.TryAcquire(ctx, opts...)
	} else {
		p, err = s.Acquire(ctx, opts...)
	}
	if err != nil {
		r.logf("%s: permit: %v", name, err)
		return
	}
	r.mu.Lock()
	r.permitsOut = live(append(r.permitsOut, p), func(p *distlock.Lease) error { return p.Err() })
	n := len(r.permitsOut)
	r.mu.Unlock()
	if n > r.permits {
		r.violate("%s: %d permits report Err() == nil at once, of %d", name, n, r.permits)
	}
	work(p.Context(), rng)
	r.logf("%s: permit released: %v", name, p.Release(context.Background()))
}

// live returns the members of xs whose err is nil, in order: every Err
// that reports nil was valid at the moment the first was asked (validity
// is an interval that began before it), so len is a count of holders valid
// at one instant.
func live[T any](xs []T, err func(T) error) []T {
	out := xs[:0]
	for _, x := range xs {
		if err(x) == nil {
			out = append(out, x)
		}
	}
	return out
}

// takeTerm registers a term handed out and checks it is the only live one.
func (r *recipeRun) takeTerm(name string, t *distlock.Term) {
	r.mu.Lock()
	r.termsOut = live(append(r.termsOut, t), (*distlock.Term).Err)
	n := len(r.termsOut)
	r.mu.Unlock()
	if n > 1 {
		r.violate("%s: %d terms report Err() == nil at once", name, n)
	}
}

func (r *recipeRun) election(name string, l *distlock.Locker, opts []distlock.Option) *distlock.Election {
	e, err := distlock.NewElection(l, "leader", name, distlock.WithTermOptions(opts...),
		distlock.WithRecampaignBackoff(distlock.Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}))
	if err != nil {
		r.violate("%s: NewElection: %v", name, err)
		return nil
	}
	return e
}

func (r *recipeRun) lead(ctx context.Context, name string, l *distlock.Locker, rng *rand.Rand, opts []distlock.Option, minHold time.Duration, how string, obs *grantLog) {
	e := r.election(name, l, opts)
	if e == nil {
		return
	}
	r.logf("%s: Lead minHold %v (%s)", name, minHold, how)
	led := map[string]bool{} // owners whose fn began
	var mu sync.Mutex
	quit := rng.IntN(2) == 0
	err := e.Lead(ctx, func(tctx context.Context, t *distlock.Term) error {
		mu.Lock()
		led[t.Lease().Owner()] = true
		mu.Unlock()
		r.takeTerm(name, t)
		work(tctx, rng)
		if quit {
			return errors.New("done")
		}
		return tctx.Err() // nil while the term lasts: the candidate is done
	})
	r.logf("%s: Lead returned: %v", name, err)
	for _, g := range obs.granted() {
		mu.Lock()
		_, ran := led[g.owner]
		mu.Unlock()
		if !ran && heldBy(l, g.key, g.owner) {
			r.violate("%s: Lead returned (%v) and its term %s, whose fn never ran, still holds %q (minHold %v)", name, err, g.owner, g.key, minHold)
		}
	}
}

func (r *recipeRun) campaign(ctx context.Context, name string, l *distlock.Locker, rng *rand.Rand, opts []distlock.Option, minHold time.Duration, how string, obs *grantLog) {
	e := r.election(name, l, opts)
	if e == nil {
		return
	}
	r.logf("%s: Campaign minHold %v (%s)", name, minHold, how)
	t, err := e.Campaign(ctx)
	if err != nil {
		r.logf("%s: Campaign: %v", name, err)
		return
	}
	r.takeTerm(name, t)
	work(t.Context(), rng)
	err = t.Resign(context.Background())
	r.logf("%s: Resign: %v", name, err)
	if err == nil && minHold > 0 {
		r.keptWithinMinHold(name, l, minHold, members(obs.granted(), []*distlock.Lease{t.Lease()}))
	}
}

// checkObserver waits, bounded, for the observer's last report to name the
// leader the backend has.
func (r *recipeRun) checkObserver(e *distlock.Election, seen *atomic.Pointer[distlock.LockInfo]) {
	deadline := time.Now().Add(time.Second + modelSlack)
	var got, want distlock.LockInfo
	for time.Now().Before(deadline) {
		var err error
		want, err = e.Leader(context.Background())
		if p := seen.Load(); err == nil && p != nil {
			got = *p
			if got.Held == want.Held && got.Owner == want.Owner && got.Token == want.Token {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.violate("Observe did not converge: last report %+v, leader %+v", got, want)
}
