package conformance

import (
	"os"
	"runtime"
	"strconv"
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
// before the others, which share the backend on keys of their own.
func (c Check) Alone() bool { return c.Destructive || aloneChecks[c.Name] }

// ConcurrencyEnv sets how many checks that need not run alone Run runs at
// once (default 4; 1 runs every check one after another).
const ConcurrencyEnv = "DISTLOCK_CONFORMANCE_CONCURRENCY"

// Concurrency is how many checks Run runs at once: ConcurrencyEnv if set to
// a positive number, else 4 (at least GOMAXPROCS): most checks wait on
// leases and servers, not on the CPU.
func Concurrency() int {
	if n, err := strconv.Atoi(os.Getenv(ConcurrencyEnv)); err == nil && n > 0 {
		return n
	}
	return max(4, runtime.GOMAXPROCS(0))
}
