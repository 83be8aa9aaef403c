package queuewaittest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// MixedOwnersAllGranted: n waiters of a few owners queue on one key of one
// Locker behind a hold of another Locker; once it is released, each owner's
// waiters join that owner's hold when it is granted (leaving the queue from
// the middle) while the others wait. Every waiter must be granted within
// the bound, never two owners at once, and the queue must be empty once all
// are released (no entry left behind a hold that was joined).
//
// dial returns Lockers on one fresh prefix; left reports how many queue
// entries the key has on the server.
func MixedOwnersAllGranted(t *testing.T, n, owners int, dial func(t *testing.T) *distlock.Locker, left func(t *testing.T) int) {
	holder, l := dial(t), dial(t)
	ctx, cancel := context.WithTimeout(t.Context(), slack.D(2*time.Minute))
	defer cancel()
	lease, err := holder.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		cur     string // the owner holding, "" for none
		holders int    // its acquisitions holding
		granted int
		wg      sync.WaitGroup
	)
	for i := range n {
		owner := fmt.Sprintf("o%d", i%owners)
		wg.Go(func() {
			x, err := l.Acquire(ctx, "k", distlock.WithOwner(owner))
			if err != nil {
				t.Errorf("waiter %d (%s): %v", i, owner, err)
				return
			}
			mu.Lock()
			if cur != "" && cur != owner {
				t.Errorf("waiter %d granted to %s while %s holds", i, owner, cur)
			}
			cur = owner
			holders++
			granted++
			mu.Unlock()
			mu.Lock()
			if holders--; holders == 0 {
				cur = ""
			}
			mu.Unlock()
			if err := x.Release(ctx); err != nil {
				t.Errorf("waiter %d: Release: %v", i, err)
			}
		})
	}
	until(t, time.Minute, "every waiter queued", func() bool { return left(t) == n+1 })
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if granted != n {
		t.Fatalf("%d of %d waiters granted", granted, n)
	}
	if k := left(t); k != 0 {
		t.Errorf("%d queue entries left after every waiter released", k)
	}
}
