package redis

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// TestMinHoldReleaseWakesWaiter: a release within a minimum hold
// (WithMinHold) shortens the lock's life from its minute-long TTL to the
// rest of the minimum hold, and the lock then expires unreleased. A waiter
// that attempted against the minute-long TTL sleeps until then (its retry
// delay is a minute too) unless the shortening release wakes it: its ctx
// ends after 20s. Both shapes: the lease's own release (release_after.lua)
// and the last release of a nested owner after an earlier one set the
// minimum hold (release.lua's lingering path).
func TestMinHoldReleaseWakesWaiter(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	waiter := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	admin := adminClient(t, srv.Addr())
	ctx := tctx(t, 2*time.Minute)
	slow := distlock.WithRetry(distlock.Backoff{Min: time.Minute, Max: time.Minute})
	long := distlock.WithTTL(time.Minute)
	for _, nested := range []bool{false, true} {
		key := "lostwake/minhold"
		if nested {
			key += "/nested"
		}
		k := holder.d.keys(key)
		h, err := holder.TryAcquire(ctx, key, long, distlock.WithMinHold(time.Second), distlock.WithOwner("h"))
		if err != nil {
			t.Fatal(err)
		}
		var inner *distlock.Lease
		if nested {
			if inner, err = holder.TryAcquire(ctx, key, long, distlock.WithOwner("h")); err != nil {
				t.Fatal(err)
			}
		}
		got := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			l, err := waiter.Acquire(wctx, key, slow, long)
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		eventually(t, 10*time.Second, "the waiter marks the lock", func() bool { return admin.HExists(ctx, k.Lock, "w").Val() })
		time.Sleep(100 * time.Millisecond) // the waiter subscribes and attempts again (it marks either way)
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if nested {
			if err := inner.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := <-got; err != nil {
			t.Fatalf("nested=%v: waiter not woken when the minimum hold cut the lock's life short: %v", nested, err)
		}
	}
}
