package redlock

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redislua"
)

// TestInspectFreeWhenQuorumUnanswered: merge calls a lock "not held, sure"
// whenever no answering node shows a holder, without counting the nodes
// that did not answer. With the holder's quorum among the silent nodes,
// Inspect then reports a held lock as free (and distlock status / unlock
// say "not held", Election.Leader "nobody leads"). Its doc: "Held false
// when no owner can reach a quorum whatever the nodes that did not answer
// hold. When the answers cannot tell (too few nodes answered), the error
// wraps ErrUnavailable".
func TestInspectFreeWhenQuorumUnanswered(t *testing.T) {
	c := startCluster(t, 5)
	c.controllable(t)
	l := newTestLocker(t, c.addrs(), WithNodeTimeout(500*time.Millisecond))
	ctx := tctx(t, time.Minute)
	const key = "admin/silent-quorum"
	k := redislua.KeysFor(prefix, key)
	lease, err := l.TryAcquire(ctx, key, distlock.WithTTL(time.Minute), distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	// The holder keeps nodes 0, 1, 2 (a quorum); nodes 3 and 4 are free
	// (they were down when it acquired, or lost their copy).
	for _, i := range []int{3, 4} {
		c.admins[i].Del(ctx, k.Lock)
	}
	if info, err := l.Inspect(ctx, key); err != nil || !info.Held || info.Owner != lease.Owner() {
		t.Fatalf("Inspect with every node up = %+v, %v; want held by %s", info, err, lease.Owner())
	}
	// The holder's quorum falls silent: the answers (two free nodes)
	// cannot tell.
	c.kill(t, 0, 1, 2)
	if info, err := l.Inspect(ctx, key); !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("Inspect with the holder's 3 nodes of 5 down = %+v, %v; want ErrUnavailable (the lock is held on a quorum)", info, err)
	}
	// No node answers at all.
	c.kill(t, 3, 4)
	if info, err := l.Inspect(ctx, key); !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("Inspect with every node down = %+v, %v; want ErrUnavailable", info, err)
	}
}
