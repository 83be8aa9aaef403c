package soak

import (
	"os"
	"testing"
)

// Env is the environment variable that enables soak tests: DISTLOCK_SOAK=1.
const Env = "DISTLOCK_SOAK"

// Enabled reports whether soak tests run (DISTLOCK_SOAK=1, as `make soak`
// sets it).
func Enabled() bool { return os.Getenv(Env) == "1" }

// Only skips t unless soak tests are enabled; what names the load, for the
// skip message.
func Only(t testing.TB, what string) {
	t.Helper()
	if !Enabled() {
		t.Skipf("soak test (%s): run with `make soak` (%s=1)", what, Env)
	}
}

// Scale is a load test's size: ci in `make ci` and other runs, soakN when
// soak tests are enabled. ci is chosen to still prove the test's claim
// (a bound that the old defect would exceed), soakN to prove it at size.
func Scale(ci, soakN int) int {
	if Enabled() {
		return soakN
	}
	return ci
}
