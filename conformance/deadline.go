package conformance

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/distlock/distlock/internal/testkit/slack"
)

// baseDeadline bounds a check that waits on no session timeout. The
// slowest checks (worker processes with a checked history, server faults
// under load) finish in well under half of it on a loaded 2-core machine.
const baseDeadline = 2 * time.Minute

// hangGrace is how long a check may run past its deadline (its context
// ended, so every wait of the check should have returned) before it is
// reported as hung.
const hangGrace = 20 * time.Second

// Deadline is how long the check may run against h: two minutes plus four
// session timeouts (the crash and pause checks wait for one or two), times
// the slack factor of the test kit (DISTLOCK_TEST_SLACK). When it passes,
// the check's context ends.
func (c Check) Deadline(h *Harness) time.Duration {
	return slack.D(baseDeadline + 4*h.sessionTimeout())
}

// hangWatch calls onHang, naming the check, if it is still running grace
// after its deadline d. The returned func disarms it.
func hangWatch(name string, d, grace time.Duration, onHang func(msg string)) (disarm func()) {
	timer := time.AfterFunc(d+grace, func() {
		onHang(fmt.Sprintf("conformance check %s hung: still running %v after its deadline of %v", name, grace, d))
	})
	return func() { timer.Stop() }
}

// panicHung ends the test binary with msg and every goroutine's stack, as
// its -timeout would, minutes later and without the check's name.
func panicHung(msg string) {
	debug.SetTraceback("all")
	panic(msg)
}
