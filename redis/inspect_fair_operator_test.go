package redis

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// TestInspectFairOperatorPlainWaiters: the operator's Locker has fair=true,
// the key's holder and waiter use plain Lockers (they do not queue in
// Redis). Inspect then counts the (empty) fair queue and reports Waiters
// 0, while an acquisition is waiting: LockInfo says 0 must mean truly
// none, -1 where the backend cannot tell (as a plain Locker reports).
func TestInspectFairOperatorPlainWaiters(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	o := &goredis.Options{Addr: srv.Addr()}
	holder, waiter := newTestLocker(t, o), newTestLocker(t, o)
	operator := newTestLocker(t, o, WithFair())
	ctx := tctx(t, time.Minute)
	const key = "inspect/fair-operator"
	lease, err := holder.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	go func() {
		if l, err := waiter.Acquire(ctx, key); err == nil {
			l.Release(ctx)
		}
	}()
	eventually(t, 10*time.Second, "waiter subscribed", func() bool {
		n, _ := admin.PubSubNumSub(ctx, holder.d.keys(key).Channel).Result()
		return n[holder.d.keys(key).Channel] > 0
	})
	info, err := distlock.Inspect(ctx, operator, key)
	if err != nil || !info.Held {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	if info.Waiters == 0 {
		t.Errorf("Inspect through a fair Locker of a key with one plain waiter: Waiters 0, want -1 (cannot tell) or 1")
	}
}
