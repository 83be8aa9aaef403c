package conformance

import (
	"math"
	"os"
	"strconv"
)

// RoundsEnv scales the load checks — mutual-exclusion, processes,
// multi-overlap, multi-processes, semaphore-permits and
// semaphore-processes — by a factor on their number of critical sections
// (default 1; at least 0.05, at most 100). Every check still runs and
// still contends from as many goroutines and processes; a factor below 1
// gives each interleaving fewer chances to show, one above 1 more. The
// repository's `make ci` runs 0.25, `make soak` 4; a run against your own
// servers should keep the default or raise it.
const RoundsEnv = "DISTLOCK_CONFORMANCE_ROUNDS"

// RoundsFactor is the factor RoundsEnv sets: 1 unless it holds a number
// in [0.05, 100] (outside it, the nearest bound).
func RoundsFactor() float64 {
	f, err := strconv.ParseFloat(os.Getenv(RoundsEnv), 64)
	if err != nil || math.IsNaN(f) || f <= 0 {
		return 1
	}
	return min(max(f, 0.05), 100)
}

// rounds is n critical sections scaled by RoundsFactor, at least 1.
func rounds(n int) int { return max(1, int(math.Round(float64(n)*RoundsFactor()))) }
