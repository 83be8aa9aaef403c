package conformance

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// aloneChecks need the backend under test to themselves: they restart or
// stop it, inject server faults, list every lock it holds, or give a
// verdict that a lease of a few hundred milliseconds was refreshed, lost or
// reported in time, which a busy test process could make late.
var aloneChecks = map[string]bool{
	// destructive, or server-wide faults
	"durable": true, "backend-down": true, "server-faults": true,
	// read every lock held in the backend (Faults.Held)
	"cancel-in-flight": true, "request-in-flight": true,
	"request-in-flight-close": true, "request-in-flight-owner": true,
	// timing verdicts on the harness's short TTL
	"acquire-waits": true, "acquire-deadline": true, "acquire-cancel": true,
	"expired-release": true, "refresh-extends": true, "auto-refresh": true,
	"holder-superseded": true, "notify": true, "fair": true, "min-hold": true,
	"pause-holder": true, "late-grant": true, "partitioned-holder": true,
	"silent-connection": true, "election-pause": true, "election-partition": true,
	"semaphore-expiry": true, "semaphore-pause": true, "multi-lost-member": true,
	"semaphore-request-in-flight": true, "multi-request-in-flight": true,
}

// Alone reports whether the check must run with no other check of the
// suite running against the same backend. Run runs these one at a time
// after the others, which share the backend on keys of their own.
func (c Check) Alone() bool { return c.Destructive || aloneChecks[c.Name] }

// ConcurrencyEnv sets how many checks that need not run alone Run runs at
// once (default 4; 1 runs every check one after another).
const ConcurrencyEnv = "DISTLOCK_CONFORMANCE_CONCURRENCY"

// checkSlots holds a token for each check that need not run alone running
// now, in any Run of the process: the suites of several harnesses running
// at once share Concurrency, so they load the machine no more than one.
var checkSlots = sync.OnceValue(func() chan struct{} { return make(chan struct{}, Concurrency()) })

// Concurrency is how many checks Run runs at once: ConcurrencyEnv if set to
// a positive number, else 4 (at least GOMAXPROCS): most checks wait on
// leases and servers, not on the CPU.
func Concurrency() int {
	if n, err := strconv.Atoi(os.Getenv(ConcurrencyEnv)); err == nil && n > 0 {
		return n
	}
	return max(4, runtime.GOMAXPROCS(0))
}

// process is held shared by every check that need not run alone, and by
// every test marked with Parallel, and exclusively by each Alone check:
// across every Run in the test binary, an Alone check has the process (its
// goroutines, its CPU share, its worker processes) to itself.
var process sync.RWMutex

// Parallel marks t, a test of a package whose conformance suites run as
// parallel tests, as one that may run while those suites do: it calls
// t.Parallel, and then holds the suites' Alone checks off until t ends
// (and waits for a running one to end first). Call it in place of
// t.Parallel in every other parallel test of such a package that has no
// parallel subtests; a test with parallel subtests calls t.Parallel, and
// its subtests call Parallel (a test waiting for its parallel subtests
// while it held the lock could deadlock: they wait for a slot of
// -test.parallel that a suite holds while it waits for the lock). Never
// call it in a test that calls Run or RunChecks.
func Parallel(t *testing.T) {
	t.Helper()
	for name := t.Name(); strings.Contains(name, "/"); {
		name = name[:strings.LastIndex(name, "/")]
		if _, held := parallelTests.Load(name); held {
			t.Fatalf("conformance.Parallel in a subtest of %s, which called it too: call t.Parallel there", name)
		}
	}
	t.Parallel()
	process.RLock()
	parallelTests.Store(t.Name(), true)
	t.Cleanup(func() {
		parallelTests.Delete(t.Name())
		process.RUnlock()
	})
}

// parallelTests are the names of the tests that hold process through
// Parallel.
var parallelTests sync.Map

// ParallelSuites lets n parallel tests run at once — a package's
// conformance suites, which wait on leases and servers far more than on
// the CPU, and its other parallel tests — unless -test.parallel was given
// on the command line: the default, GOMAXPROCS, would leave a suite
// waiting for another to end on a 2-core machine. Call it in TestMain,
// before m.Run.
func ParallelSuites(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	p := flag.Lookup("test.parallel")
	if given || p == nil {
		return
	}
	if cur, err := strconv.Atoi(p.Value.String()); err == nil && cur < n {
		_ = p.Value.Set(strconv.Itoa(n))
	}
}
