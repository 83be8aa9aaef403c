package redis

import (
	"testing"
)

// TestCloseWithRequestInFlightLeavesNoLock is TestDelayedRequestUndone
// with Close right after the timed-out TryAcquire (a service shutting down
// after the timeout): the acquire script lands after Close began, and the
// lock must still be given back within the bounded cleanup, not left for
// its 10-minute TTL. (Close's Quit cut UndoAcquire's schedule to one last
// try, which came before the script landed.)
func TestCloseWithRequestInFlightLeavesNoLock(t *testing.T) { delayedRequestUndone(t, true) }
