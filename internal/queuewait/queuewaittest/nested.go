package queuewaittest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// LastReleaseDuringCountWrite: A and B, one owner on one Locker, share a
// hold. A's release keeps the hold (B still has it) and writes the new
// count; before that write lands, B's release, the last, removes the
// lock. Both releases are the owner's own: neither may report the lock
// lost.
//
// dial returns a Locker, on a fresh prefix, whose driver calls publish
// just before it writes a hold's count.
func LastReleaseDuringCountWrite(t *testing.T, dial func(t *testing.T, publish func()) *distlock.Locker) {
	var armed atomic.Pointer[func()]
	l := dial(t, func() {
		if f := armed.Swap(nil); f != nil {
			(*f)()
		}
	})
	owner := distlock.WithOwner("o")
	a, err := l.Acquire(ctx(t, 30*time.Second), "k", owner)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Acquire(ctx(t, 30*time.Second), "k", owner)
	if err != nil {
		t.Fatal(err)
	}
	var bErr error
	releaseB := func() { bErr = b.Release(ctx(t, 10*time.Second)) }
	armed.Store(&releaseB)
	if err := a.Release(ctx(t, 10*time.Second)); err != nil {
		t.Errorf("A's release, the hold kept by B: %v", err)
	}
	if armed.Load() != nil {
		t.Fatal("A's release wrote no count")
	}
	if bErr != nil {
		t.Errorf("B's release, the last: %v", bErr)
	}
	info, err := l.Inspect(ctx(t, 10*time.Second), "k")
	if err != nil || info.Held {
		t.Errorf("after both releases: %+v, %v; want the lock free", info, err)
	}
}
