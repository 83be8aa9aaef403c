package redis

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOperatorSeesName: the lock keys are hashed, but an operator who scans
// the keyspace reads each lock's name (and metadata) with one HGETALL.
func TestOperatorSeesName(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, 30*time.Second)
	lease, err := l.TryAcquire(ctx, "invoices/2026-11 {eu}", distlock.WithMetadata("host=a pid=7"))
	require.NoError(t, err)
	defer lease.Release(ctx)
	var found []map[string]string
	iter := admin.Scan(ctx, 0, "distlock:*", 100).Iterator()
	for iter.Next(ctx) {
		if admin.Type(ctx, iter.Val()).Val() == "hash" {
			found = append(found, admin.HGetAll(ctx, iter.Val()).Val())
		}
	}
	if len(found) != 1 || found[0]["name"] != "invoices/2026-11 {eu}" || found[0]["meta"] != "host=a pid=7" || found[0]["o"] != lease.Owner() {
		t.Errorf("scan + HGETALL found %v", found)
	}
}

// TestForceReleaseHandsOn: a waiter blocked on a lock held for a minute
// gets it after a ForceRelease, within its 20s ctx, with a higher token and
// its own metadata; in fair mode the script grants it to the waiter. (The
// wake-up message itself: redislua's TestForceRelease.)
func TestForceReleaseHandsOn(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	for _, fair := range []bool{false, true} {
		var opts []Option
		if fair {
			opts = append(opts, WithFair())
		}
		o := &goredis.Options{Addr: srv.Addr()}
		holder, waiter, operator := newTestLocker(t, o, opts...), newTestLocker(t, o, opts...), newTestLocker(t, o, opts...)
		ctx := tctx(t, time.Minute)
		key := "force/hands-on"
		victim, err := holder.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
		require.NoError(t, err)
		got := make(chan *distlock.Lease, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			lease, err := waiter.Acquire(wctx, key, distlock.WithMetadata("waiter"))
			assert.NoError(t, err, "fair %v: waiter", fair)
			got <- lease
		}()
		eventually(t, 10*time.Second, "waiter queued or subscribed", func() bool {
			n, _ := admin.PubSubNumSub(ctx, holder.d.keys(key).Channel).Result()
			return n[holder.d.keys(key).Channel] > 0
		})
		info, err := operator.ForceRelease(ctx, key)
		if err != nil || info.Owner != victim.Owner() || info.Token != victim.Token() {
			t.Fatalf("fair %v: ForceRelease = %+v, %v", fair, info, err)
		}
		lease := <-got
		if lease == nil {
			continue
		}
		if lease.Token() <= victim.Token() {
			t.Errorf("fair %v: token %d after evicting %d", fair, lease.Token(), victim.Token())
		}
		if info, err := operator.Inspect(ctx, key); err != nil || info.Owner != lease.Owner() || info.Metadata != "waiter" {
			t.Errorf("fair %v: Inspect after the handover = %+v, %v", fair, info, err)
		}
		_ = lease.Release(ctx)
	}
}
