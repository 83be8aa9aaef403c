package zookeeper

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestOwnerGrantedBeforeQueueing: two acquisitions of one owner id race on
// one Locker. B's node is created behind A's, and A is granted before B
// looks where it stands. B must join A's hold at once (reentrancy: each
// acquisition of the owner succeeds at once), whether it waits (Acquire:
// not queue behind its own owner until A is released) or not (TryAcquire:
// not ErrNotAcquired while its owner holds). The afterCreate hook orders
// the calls: A, created, waits until B's node is created, and B goes on
// only once A's Acquire returned.
func TestOwnerGrantedBeforeQueueing(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
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
			hooks := &testHooks{afterCreate: func(string) {
				switch creates.Add(1) {
				case 1: // A's
					close(aCreated)
					<-bCreated
				case 2: // B's
					close(bCreated)
					<-aDone
				}
			}}
			l := dialT(t, []string{s.Addr()}, WithBasePath(uniqueBase(t)), withHooks(hooks))
			owner := distlock.WithOwner("o")
			type result struct {
				l   *distlock.Lease
				err error
			}
			aRes := make(chan result, 1)
			go func() {
				a, err := l.Acquire(ctxT(t, 30*time.Second), "k", owner)
				aRes <- result{a, err}
				close(aDone)
			}()
			<-aCreated
			b, err := tc.acquire(l, ctxT(t, slack.D(5*time.Second)), "k", owner)
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
				if err := x.Release(ctxT(t, 10*time.Second)); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
