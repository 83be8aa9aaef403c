package distlock_test

import (
	"strconv"
	"testing"
	"time"
)

func atoi(s string) (int, error) { return strconv.Atoi(s) }

func itoa(i int) string { return strconv.Itoa(i) }

// waitFor polls cond every 5ms until it holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
