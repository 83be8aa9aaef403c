// Package slack is the test suite's one timing knob. A test that needs
// wall-clock slack — a margin a loaded machine may eat, a wait for
// something to happen that has no event to wait on — takes it from D, so a
// slow machine is handled by setting DISTLOCK_TEST_SLACK once instead of
// by a bigger sleep in one test.
//
// DISTLOCK_TEST_SLACK is a factor (default 1, at most 20): D(d) is d times
// it. Durations that are part of what a test proves (a TTL, the margin a
// loss signal must keep) are never scaled; only the tolerances around them.
package slack

import (
	"os"
	"strconv"
	"sync"
	"time"
)

// Env is the environment variable that sets the factor.
const Env = "DISTLOCK_TEST_SLACK"

var factor = sync.OnceValue(func() float64 {
	f, err := strconv.ParseFloat(os.Getenv(Env), 64)
	if err != nil || f < 1 {
		return 1
	}
	return min(f, 20)
})

// Factor is the slack factor in force: 1 unless DISTLOCK_TEST_SLACK sets
// a larger one.
func Factor() float64 { return factor() }

// D is d scaled by the slack factor.
func D(d time.Duration) time.Duration { return time.Duration(float64(d) * factor()) }
