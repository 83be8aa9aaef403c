package redis

import (
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// TestReshardWhileHeld moves the slot of a held lock, for which another
// client waits, from its master to another (CLUSTER SETSLOT MIGRATING /
// IMPORTING, MIGRATE of its keys, SETSLOT NODE), checking at each stage
// what the holder's refresh, a third client's attempt and the waiter see;
// then the holder releases on the new master and the waiter is woken and
// takes the lock with a higher token. The holder's refreshes follow ASK
// and MOVED at every stage. An acquisition attempt on the migrating slot
// gets TRYAGAIN (ErrUnavailable) at every stage, even before any key
// moved: the acquire script also names the lock's legacy fencing counter,
// which never exists, and Redis refuses a multi-key command on a migrating
// slot when some of its keys are missing. The waiter here uses
// WithRetryUnavailable so that an attempt in that window does not end its
// wait.
func TestReshardWhileHeld(t *testing.T) {
	testserver.SkipShort(t, "redis cluster")
	conformance.Parallel(t)
	cluster := testserver.RedisClusterWith(t, testserver.ClusterConfig{Masters: 3})
	ctx := tctx(t, 2*time.Minute)
	url := "redis+cluster://" + strings.Join(cluster.Addrs(), ",") + "/?prefix=rs:"
	open := func() *distlock.Locker {
		l, err := distlock.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	a, b, c := open(), open(), open()
	const key = "reshard"
	keys := redislua.KeysFor("rs:", key)
	slot := redislua.Slot(keys.Lock)

	node := func(addr string) *goredis.Client {
		n := goredis.NewClient(&goredis.Options{Addr: addr})
		t.Cleanup(func() { _ = n.Close() })
		return n
	}
	admin := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { _ = admin.Close() })
	src, err := admin.MasterForKey(ctx, keys.Lock)
	if err != nil {
		t.Fatal(err)
	}
	var dst *goredis.Client
	for _, addr := range cluster.Addrs() {
		if addr != src.Options().Addr {
			dst = node(addr)
			break
		}
	}
	srcID, dstID := src.Do(ctx, "CLUSTER", "MYID").Val(), dst.Do(ctx, "CLUSTER", "MYID").Val()
	if srcID == nil || dstID == nil {
		t.Fatal("CLUSTER MYID")
	}

	lease, err := a.Acquire(ctx, key, distlock.WithTTL(slack.D(10*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	before := lease.Token()
	type result struct {
		l   *distlock.Lease
		err error
	}
	waiter := make(chan result, 1)
	go func() {
		l, err := b.Acquire(ctx, key, distlock.WithTTL(slack.D(10*time.Second)), distlock.WithRetryUnavailable(true))
		waiter <- result{l, err}
	}()
	// The waiter has attempted (the lock is marked for it) before the move.
	eventually(t, slack.D(5*time.Second), "the waiter's attempt marked the lock", func() bool {
		return src.HExists(ctx, keys.Lock, "w").Val()
	})

	// Stage 1: the slot is migrating, its keys still on the source.
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("IMPORTING", dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must("MIGRATING", src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	if err := lease.Refresh(ctx, slack.D(10*time.Second)); err != nil {
		t.Errorf("refresh while the slot is migrating, keys on the source: %v", err)
	}
	_, err = c.TryAcquire(ctx, key)
	t.Logf("a third client's attempt while the slot is migrating, keys on the source: %v", err)
	if !errors.Is(err, distlock.ErrNotAcquired) && !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("third client while migrating: %v, want ErrNotAcquired or ErrUnavailable", err)
	}

	// Stage 2: the lock's hash moved, its slot's fence counter not yet.
	dstHost, dstPort, _ := strings.Cut(dst.Options().Addr, ":")
	must("MIGRATE lock", src.Do(ctx, "MIGRATE", dstHost, dstPort, "", 0, 5000, "KEYS", keys.Lock).Err())
	if err := lease.Refresh(ctx, slack.D(10*time.Second)); err != nil {
		t.Errorf("refresh with the lock on the target (ASK): %v", err)
	}
	_, err = c.TryAcquire(ctx, key)
	t.Logf("a third client's attempt with the slot's keys split: %v", err)
	if !errors.Is(err, distlock.ErrNotAcquired) && !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("third client with the keys split: %v, want ErrNotAcquired or ErrUnavailable", err)
	}

	// Stage 3: every key moved, the slot assigned to the target.
	for range 100 {
		ks, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		must("GETKEYSINSLOT", err)
		if len(ks) == 0 {
			break
		}
		args := []any{"MIGRATE", dstHost, dstPort, "", 0, 5000, "KEYS"}
		for _, k := range ks {
			args = append(args, k)
		}
		must("MIGRATE", src.Do(ctx, args...).Err())
	}
	for _, addr := range cluster.Addrs() {
		must("SETSLOT NODE", node(addr).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	}
	if err := lease.Refresh(ctx, slack.D(10*time.Second)); err != nil {
		t.Errorf("refresh after the move (MOVED): %v", err)
	}
	select {
	case r := <-waiter:
		t.Fatalf("the waiter returned while the lock was held: %v", r.err)
	default:
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release after the move: %v", err)
	}
	select {
	case r := <-waiter:
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		if r.l.Token() <= before {
			t.Errorf("token %d after the move, %d before", r.l.Token(), before)
		}
		_ = r.l.Release(ctx)
	case <-time.After(slack.D(5 * time.Second)):
		t.Fatal("the waiter was not woken by the release on the new master")
	}
	if n := dst.Exists(ctx, keys.Fence).Val(); n != 1 {
		t.Errorf("the slot's fence counter is not on the target (%d)", n)
	}
}
