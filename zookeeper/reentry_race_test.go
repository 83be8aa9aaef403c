package zookeeper

import (
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/queuewait/queuewaittest"
)

// TestOwnerGrantedBeforeQueueing: an acquisition whose owner is granted
// the key between its create and its look joins that hold, waiting or not
// (queuewaittest.OwnerGrantedBeforeQueueing).
func TestOwnerGrantedBeforeQueueing(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	queuewaittest.OwnerGrantedBeforeQueueing(t, func(t *testing.T, afterCreate func()) *distlock.Locker {
		hooks := &testHooks{afterCreate: func(string) { afterCreate() }}
		return dialT(t, []string{s.Addr()}, WithBasePath(uniqueBase(t)), withHooks(hooks))
	})
}

// TestTryBehindOwnersAttempt: a try whose owner's attempt heads the queue,
// not granted yet, joins that hold instead of being refused
// (queuewaittest.TryBehindOwnersAttempt).
func TestTryBehindOwnersAttempt(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	queuewaittest.TryBehindOwnersAttempt(t, func(t *testing.T, afterCreate, headWait func()) *distlock.Locker {
		hooks := &testHooks{afterCreate: func(string) { afterCreate() }, headWait: headWait}
		return dialT(t, []string{s.Addr()}, WithBasePath(uniqueBase(t)), withHooks(hooks))
	})
}

// TestLastReleaseDuringCountWrite: a release that keeps a nested hold and
// the last release racing (queuewaittest.LastReleaseDuringCountWrite).
func TestLastReleaseDuringCountWrite(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	queuewaittest.LastReleaseDuringCountWrite(t, func(t *testing.T, publish func()) *distlock.Locker {
		return dialT(t, []string{s.Addr()}, WithBasePath(uniqueBase(t)), withHooks(&testHooks{publish: publish}))
	})
}
