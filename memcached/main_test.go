package memcached

import (
	"os"
	"testing"

	"github.com/distlock/distlock/conformance"
)

func TestMain(m *testing.M) {
	conformance.ServeWorker()     // the suite's worker processes re-run this binary
	conformance.ParallelSuites(4) // both conformance suites, and two other parallel tests
	os.Exit(m.Run())
}
