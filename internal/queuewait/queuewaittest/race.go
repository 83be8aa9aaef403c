package queuewaittest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// OwnerGrantedBeforeQueueing: two acquisitions of one owner id race on one
// Locker. B's entry is created behind A's, and A is granted before B looks
// where it stands. B must join A's hold at once (reentrancy: each
// acquisition of the owner succeeds at once), whether it waits (Acquire:
// not queue behind its own owner until A is released) or not (TryAcquire:
// not ErrNotAcquired while its owner holds).
//
// dial returns a Locker, on a fresh prefix, whose driver calls afterCreate
// once an attempt's entry is created, before the attempt looks where it
// stands. The hook orders the calls: A, created, waits until B's entry is
// created, and B goes on only once A's Acquire returned.
func OwnerGrantedBeforeQueueing(t *testing.T, dial func(t *testing.T, afterCreate func()) *distlock.Locker) {
	for _, tc := range []struct {
		name    string
		acquire func(*distlock.Locker, context.Context, string, ...distlock.Option) (*distlock.Lease, error)
	}{
		{"Acquire", (*distlock.Locker).Acquire},
		{"TryAcquire", (*distlock.Locker).TryAcquire},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var creates atomic.Int32
			aCreated, bCreated, aDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
			l := dial(t, func() {
				switch creates.Add(1) {
				case 1: // A's
					close(aCreated)
					<-bCreated
				case 2: // B's
					close(bCreated)
					<-aDone
				}
			})
			owner := distlock.WithOwner("o")
			type result struct {
				l   *distlock.Lease
				err error
			}
			aRes := make(chan result, 1)
			go func() {
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				a, err := l.Acquire(ctx, "k", owner)
				aRes <- result{a, err}
				close(aDone)
			}()
			<-aCreated
			ctx, cancel := context.WithTimeout(t.Context(), slack.D(5*time.Second))
			defer cancel()
			b, err := tc.acquire(l, ctx, "k", owner)
			a := <-aRes
			if a.err != nil {
				t.Fatalf("A: %v", a.err)
			}
			if err != nil {
				t.Fatalf("B, of A's owner, while A holds: %v; want to join A's hold at once", err)
			}
			if b.Token() != a.l.Token() {
				t.Errorf("B's token %d, A's %d: want one hold", b.Token(), a.l.Token())
			}
			for _, x := range []*distlock.Lease{b, a.l} {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				if err := x.Release(ctx); err != nil {
					t.Error(err)
				}
				cancel()
			}
		})
	}
}
