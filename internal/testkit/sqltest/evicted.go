package sqltest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// EvictedNest is the scenario of an owner that nests into a lock the server
// took from it without its knowing: a holds key as owner "host-1" (its
// keepalive must be slow enough not to notice the loss during the test);
// evict ends that hold on the server (ForceRelease, a terminated session);
// b takes the lock; then a's TryAcquire as "host-1" must not succeed while
// b holds the lock (two live holders). With sessionBound, a's first lease
// must end with ErrLockLost at the latest once a's nested attempt has asked
// the server; else (a lease row) at its next Refresh, which must fail.
func EvictedNest(t *testing.T, a, b *distlock.Locker, key string, sessionBound bool, evict func(ctx context.Context) error) {
	t.Helper()
	ctx := Ctx(t, slack.D(time.Minute))
	first, err := a.TryAcquire(ctx, key, distlock.WithOwner("host-1"))
	if err != nil {
		t.Fatalf("a's first acquisition: %v", err)
	}
	defer func() { _ = first.Release(context.Background()) }()
	if err := evict(ctx); err != nil {
		t.Fatalf("evict a's hold: %v", err)
	}
	var second *distlock.Lease
	// The server frees the lock once the evicted session has ended.
	if !Until(slack.D(10*time.Second), func() bool {
		second, err = b.TryAcquire(ctx, key)
		return err == nil
	}) {
		t.Fatalf("b could not take the evicted lock: %v", err)
	}
	defer func() { _ = second.Release(context.Background()) }()
	if second.Token() <= first.Token() {
		t.Errorf("b's token %d is not above the evicted %d", second.Token(), first.Token())
	}

	nested, err := a.TryAcquire(ctx, key, distlock.WithOwner("host-1"))
	if err == nil {
		defer func() { _ = nested.Release(context.Background()) }()
		t.Errorf("a nested into its evicted hold (token %d, Err %v) while b holds the lock (token %d, Err %v): two live holders",
			nested.Token(), nested.Err(), second.Token(), second.Err())
	} else if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("a's nested attempt: %v, want ErrNotAcquired", err)
	}
	if !sessionBound {
		if err := first.Refresh(ctx, 15*time.Second); !errors.Is(err, distlock.ErrNotHeld) {
			t.Errorf("a's evicted lease refreshed: %v, want ErrNotHeld", err)
		}
	}
	select {
	case <-first.Done():
		if !errors.Is(first.Err(), distlock.ErrLockLost) {
			t.Errorf("a's evicted lease ended with %v, want ErrLockLost", first.Err())
		}
	case <-time.After(slack.D(time.Second)):
		t.Errorf("a's evicted lease still reports Err() == nil after the server told it the lock is gone")
	}
	if second.Err() != nil {
		t.Errorf("b's lease ended: %v", second.Err())
	}
}
