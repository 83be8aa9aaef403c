package conformance

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// T is the part of *testing.T the checks use. RunChecks supplies its own.
type T interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Failed() bool
	Cleanup(func())
	Context() context.Context
}

// Check is one conformance check.
type Check struct {
	// Name is the subtest name, such as "mutual-exclusion".
	Name string
	// Contract is the line of the contract the check verifies; failures
	// quote it.
	Contract string
	// Destructive checks disturb the backend for other users (restart a
	// server); the CLI runs them only when asked to.
	Destructive bool
	// Fn runs the check.
	Fn func(t T, h *Harness)
}

// Run runs every check as a subtest of t, and returns when every one has
// ended. The checks that need not have the backend to themselves run
// first, concurrently, at most Concurrency at once in the process, each on
// keys of its own; then those that do (see Check.Alone), one at a time. Runs of
// several harnesses may go on at once in one test binary (parallel tests,
// see Parallel): an Alone check then still runs with no other check, of
// any harness, and no Parallel test running. Each check runs under its
// deadline (see Check.Deadline): its context ends then, and a check still
// running a grace period later stops the test binary with the check's name
// and every goroutine's stack, instead of at the test binary's timeout.
func Run(t *testing.T, h Harness) {
	t.Helper()
	runTests(t, &h, Checks(), panicHung)
}

// RunMatching runs, as Run does, only the checks for which keep returns
// true: for a second harness over a driver that another harness in the
// same package already runs every check on (another constructor of the
// same driver, say), whose difference only some checks reach.
func RunMatching(t *testing.T, h Harness, keep func(Check) bool) {
	t.Helper()
	var checks []Check
	for _, c := range Checks() {
		if keep(c) {
			checks = append(checks, c)
		}
	}
	if len(checks) == 0 {
		t.Fatal("conformance.RunMatching: keep matches no check")
	}
	runTests(t, &h, checks, panicHung)
}

// runTests runs checks as subtests of t; onHang reports a hung check.
func runTests(t *testing.T, h *Harness, checks []Check, onHang func(msg string)) {
	t.Helper()
	run := func(c Check) {
		t.Run(c.Name, func(t *testing.T) {
			ct := &contractT{T: t, contract: c.Contract}
			d := c.Deadline(h)
			var cancel context.CancelFunc
			ct.ctx, cancel = context.WithTimeout(t.Context(), d)
			defer cancel()
			defer hangWatch(h.Name+"/"+c.Name, d, hangGrace, onHang)()
			c.Fn(ct, h)
		})
	}
	var shared, alone []Check
	for _, c := range checks {
		if c.Alone() {
			alone = append(alone, c)
		} else {
			shared = append(shared, c)
		}
	}
	// The shared checks first: they may overlap the package's other
	// parallel tests (see Parallel), which an Alone check has to wait out.
	// testing.T.Run may be called from several goroutines at once; the
	// subtests keep their names.
	sem := checkSlots()
	var wg sync.WaitGroup
	for _, c := range shared {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			process.RLock()
			defer process.RUnlock()
			run(c)
		}()
	}
	wg.Wait()
	for _, c := range alone {
		func() {
			process.Lock()
			defer process.Unlock()
			run(c)
		}()
	}
}

// contractT prefixes failures with the contract line the check verifies,
// and carries the check's deadline in its context.
type contractT struct {
	T
	contract string
	ctx      context.Context // nil: the T's own
}

// Context is the check's context: the T's, ended at the check's deadline.
func (c *contractT) Context() context.Context {
	if c.ctx != nil {
		return c.ctx
	}
	return c.T.Context()
}

func (c *contractT) Errorf(format string, args ...any) {
	c.T.Helper()
	c.T.Errorf("%s", c.failure(format, args))
}

func (c *contractT) Fatalf(format string, args ...any) {
	c.T.Helper()
	c.T.Fatalf("%s", c.failure(format, args))
}

// failure words a failure: a contract violation, unless an argument is an
// error wrapping distlock.ErrUnavailable, which means the backend could not
// be reached or could not decide and the check could not tell.
func (c *contractT) failure(format string, args []any) string {
	msg := fmt.Sprintf(format, args...)
	for _, a := range args {
		if err, ok := a.(error); ok && errors.Is(err, distlock.ErrUnavailable) {
			if m, ok := c.T.(interface{ markUnavailable() }); ok {
				m.markUnavailable()
			}
			return "backend unavailable during the check: " + msg
		}
	}
	if m, ok := c.T.(interface{ markViolated() }); ok {
		m.markViolated()
	}
	return fmt.Sprintf("contract %q violated: %s", c.contract, msg)
}

// Status is a check's outcome.
type Status string

// The outcomes of a check.
const (
	Pass Status = "pass"
	Fail Status = "FAIL"
	Skip Status = "skip"
	// Unavailable: the check failed only because the backend was
	// unavailable (an error wrapping distlock.ErrUnavailable); it found no
	// contract violation.
	Unavailable Status = "unavailable"
	// Interrupted: the run's ctx ended (Ctrl-C, a timeout) while the check
	// ran; whatever the check saw then says nothing about the contract.
	Interrupted Status = "interrupted"
	// NotRun: the run's ctx ended before the check started.
	NotRun Status = "not run"
)

// Result is the outcome of one check run by RunChecks.
type Result struct {
	Name     string
	Contract string
	Status   Status
	Duration time.Duration
	// Message holds the failures, or the reason for a skip.
	Message string
}

// Options select what RunChecks runs.
type Options struct {
	// Match selects checks by name; nil runs all.
	Match *regexp.Regexp
	// Destructive allows checks that disturb the backend (restarts).
	Destructive bool
	// Progress, if set, is called before (with Status "") and after each
	// check.
	Progress func(Result)
}

// RunChecks runs the checks without package testing, one after another,
// and returns their results. Its Alone checks, too, run with no other
// check of the process running (see Run). ctx bounds the whole run: when
// it ends, the running check sees its context cancelled and is reported
// Interrupted (unless it skipped), and the checks after it NotRun.
func RunChecks(ctx context.Context, h Harness, opts Options) []Result {
	var results []Result
	for _, c := range Checks() {
		if opts.Match != nil && !opts.Match.MatchString(c.Name) {
			continue
		}
		r := Result{Name: c.Name, Contract: c.Contract}
		if c.Destructive && !opts.Destructive {
			r.Status, r.Message = Skip, "destructive: run with --destructive"
			results = append(results, r)
			if opts.Progress != nil {
				opts.Progress(r)
			}
			continue
		}
		if opts.Progress != nil {
			opts.Progress(r)
		}
		r = runOne(ctx, c, &h)
		if ctx.Err() != nil && r.Status != Skip {
			r.Status, r.Message = Interrupted, fmt.Sprintf("interrupted (%v); the check's outcome says nothing about the contract", context.Cause(ctx))
		}
		results = append(results, r)
		if opts.Progress != nil {
			opts.Progress(r)
		}
		if ctx.Err() != nil {
			return append(results, notRun(c.Name, opts)...)
		}
	}
	return results
}

// notRun is the NotRun result of every check after the one named last
// that opts select.
func notRun(last string, opts Options) []Result {
	var out []Result
	after := false
	for _, c := range Checks() {
		if after && (opts.Match == nil || opts.Match.MatchString(c.Name)) {
			out = append(out, Result{Name: c.Name, Contract: c.Contract, Status: NotRun})
		}
		after = after || c.Name == last
	}
	return out
}

func runOne(ctx context.Context, c Check, h *Harness) Result {
	if c.Alone() {
		process.Lock()
		defer process.Unlock()
	} else {
		process.RLock()
		defer process.RUnlock()
	}
	rt := &runT{ctx: ctx}
	rt.ctx, rt.cancel = context.WithCancel(ctx)
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer rt.runCleanups()
		c.Fn(&contractT{T: rt, contract: c.Contract}, h)
	}()
	<-done
	r := Result{Name: c.Name, Contract: c.Contract, Duration: time.Since(start)}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	switch {
	case rt.failed && rt.unavailable && !rt.violated:
		r.Status = Unavailable
	case rt.failed:
		r.Status = Fail
	case rt.skipped:
		r.Status = Skip
	default:
		r.Status = Pass
	}
	r.Message = rt.msg
	return r
}

// runT implements T for RunChecks. Fatalf and Skipf end the check's
// goroutine with runtime.Goexit, as package testing does.
type runT struct {
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	failed  bool
	skipped bool
	// unavailable and violated record the kinds of failure (contractT).
	unavailable, violated bool
	msg                   string
	cleanups              []func()
}

func (r *runT) Helper()                  {}
func (r *runT) Logf(string, ...any)      {}
func (r *runT) Context() context.Context { return r.ctx }

func (r *runT) note(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.msg != "" {
		r.msg += "\n"
	}
	r.msg += s
}

func (r *runT) Errorf(format string, args ...any) {
	r.note(fmt.Sprintf(format, args...))
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
}

func (r *runT) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *runT) Skipf(format string, args ...any) {
	r.note(fmt.Sprintf(format, args...))
	r.mu.Lock()
	r.skipped = true
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *runT) markUnavailable() { r.mu.Lock(); r.unavailable = true; r.mu.Unlock() }
func (r *runT) markViolated()    { r.mu.Lock(); r.violated = true; r.mu.Unlock() }

func (r *runT) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *runT) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *runT) runCleanups() {
	r.cancel()
	for {
		r.mu.Lock()
		n := len(r.cleanups)
		if n == 0 {
			r.mu.Unlock()
			return
		}
		f := r.cleanups[n-1]
		r.cleanups = r.cleanups[:n-1]
		r.mu.Unlock()
		f()
	}
}
