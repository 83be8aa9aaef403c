package queuewaittest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TryBehindOwnersAttempt: A, an acquisition of owner o, has created its
// entry, first in the queue, and is not granted yet; B, a try of owner o
// on the same Locker, finds A's entry at the head of the queue. No other
// owner holds the key or is ahead, so B must not be refused: it joins A's
// hold once A is granted.
//
// dial returns a Locker, on a fresh prefix, whose driver calls afterCreate
// once an attempt's entry is created, before the attempt looks where it
// stands, and headWait when a try waits for an attempt of its owner at the
// head of the queue. The hooks order the calls: A, created, goes on only
// once B waits for it (or B returned: refused).
func TryBehindOwnersAttempt(t *testing.T, dial func(t *testing.T, afterCreate, headWait func()) *distlock.Locker) {
	var creates atomic.Int32
	bWaits, bDone := make(chan struct{}), make(chan struct{})
	var waits atomic.Int32
	aCreated := make(chan struct{})
	l := dial(t, func() {
		if creates.Add(1) == 1 { // A's
			close(aCreated)
			select {
			case <-bWaits:
			case <-bDone:
			}
		}
	}, func() {
		if waits.Add(1) == 1 {
			close(bWaits)
		}
	})
	owner := distlock.WithOwner("o")
	type result struct {
		l   *distlock.Lease
		err error
	}
	aRes := make(chan result, 1)
	go func() {
		a, err := l.Acquire(ctx(t, 30*time.Second), "k", owner)
		aRes <- result{a, err}
	}()
	<-aCreated
	bctx, cancel := context.WithTimeout(t.Context(), slack.D(10*time.Second))
	defer cancel()
	b, err := l.TryAcquire(bctx, "k", owner)
	close(bDone)
	a := <-aRes
	if a.err != nil {
		t.Fatalf("A: %v", a.err)
	}
	defer func() { _ = a.l.Release(ctx(t, 10*time.Second)) }()
	if err != nil {
		t.Fatalf("B, a try of A's owner while A's entry heads the queue: %v; want to join A's hold", err)
	}
	defer func() { _ = b.Release(ctx(t, 10*time.Second)) }()
	if b.Token() != a.l.Token() {
		t.Errorf("B's token %d, A's %d: want one hold", b.Token(), a.l.Token())
	}
}
