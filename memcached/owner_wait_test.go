package memcached

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// TestQueuedSameOwnerNestsAtOnce (issue 14 defect 9 on a polling backend):
// two acquisitions by owner O wait behind another holder; when one of them
// is granted the lock, the other — already waiting, asleep in its 2 s poll
// 1 s out of step with the first's
// — nests at once instead of at its next poll, as a new acquisition by O
// would at that moment. Before the fix the second one waited for its poll.
func TestQueuedSameOwnerNestsAtOnce(t *testing.T) {
	conformance.Parallel(t)
	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	cd := &countingDriver{driver: openDriver(t, "memcached://"+srv.Addr())}
	l := distlock.New(cd, "memcached")
	t.Cleanup(func() { _ = l.Close() })
	ctx := ctxT(t, 30*time.Second)
	const key = "owner-wait"
	other, err := l.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	slow := distlock.WithRetry(distlock.Backoff{Min: 2 * time.Second, Max: 2 * time.Second})
	type grant struct {
		ls  *distlock.Lease
		err error
		at  time.Time
	}
	got := make(chan grant, 2)
	for i := range 2 {
		go func() {
			// Polls 1 s apart: the first at 0, 2, 4 s, the second at 1, 3, 5 s.
			time.Sleep(time.Duration(i) * time.Second)
			ls, err := l.Acquire(ctx, key, distlock.WithOwner("O"), distlock.WithTTL(10*time.Second), slow)
			got <- grant{ls, err, time.Now()}
		}()
	}
	// Both have failed once and sleep in their poll (the first attempt was
	// other's).
	if !waitFor(5*time.Second, func() bool { return cd.attempts.Load() >= 3 }) {
		t.Fatalf("%d attempts after 5s, want 3", cd.attempts.Load())
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	first := <-got
	if first.err != nil {
		t.Fatal(first.err)
	}
	select {
	case second := <-got:
		if second.err != nil {
			t.Fatal(second.err)
		}
		if gap := second.at.Sub(first.at); gap > 400*time.Millisecond {
			t.Errorf("second acquisition of the holding owner came %v after the first", gap)
		}
		if second.ls.Token() != first.ls.Token() {
			t.Errorf("nested hold has token %d, holder %d", second.ls.Token(), first.ls.Token())
		}
		_ = second.ls.Release(ctx)
	case <-time.After(3 * time.Second):
		t.Fatalf("second acquisition of the holding owner still waiting 3s after the first was granted")
	}
	_ = first.ls.Release(ctx)
}
