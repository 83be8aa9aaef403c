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
