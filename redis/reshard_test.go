package redis

import (
	"context"
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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReshardWhileHeld moves the slot of a held lock, for which another
// client waits, from its master to another (CLUSTER SETSLOT MIGRATING /
// IMPORTING, MIGRATE of its keys, SETSLOT NODE), checking at each stage
// what the holder's refresh, a third client's attempt and the waiter see;
// then the holder releases on the new master and the waiter is woken and
// takes the lock with a higher token. The holder's refreshes follow ASK
// and MOVED at every stage. An acquisition attempt on the migrating slot
// gets TRYAGAIN at every stage, even before any key moved (the acquire
// script also names the lock's legacy fencing counter, which never
// exists, and Redis refuses a multi-key command on a migrating slot when
// some of its keys are missing): the third client's attempts, which the
// driver retries until the migration ends (TestReshardTryAgainRetried),
// are cut short by their ctx. The waiter uses WithRetryUnavailable: its
// wait is capped at the lock's TTL, and an attempt it makes while the test
// holds the slot split (for longer than the driver's retry bound on a
// loaded machine) must not end its wait.
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

	src, dst := slotMasters(t, ctx, cluster, keys.Lock)
	m := newSlotMigration(t, ctx, cluster, slot, src, dst)

	lease, err := a.Acquire(ctx, key, distlock.WithTTL(slack.D(10*time.Second)))
	require.NoError(t, err)
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

	// short is the ctx of the third client's attempts: they wait for the
	// migration to end.
	short := func() context.Context { return tctx(t, slack.D(200*time.Millisecond)) }

	// Stage 1: the slot is migrating, its keys still on the source.
	m.begin()
	assert.NoError(t, lease.Refresh(ctx, slack.D(10*time.Second)), "refresh while the slot is migrating, keys on the source")
	_, err = c.TryAcquire(short(), key)
	t.Logf("a third client's attempt while the slot is migrating, keys on the source: %v", err)
	if !errors.Is(err, distlock.ErrNotAcquired) && !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("third client while migrating: %v, want ErrNotAcquired or ErrUnavailable", err)
	}

	// Stage 2: the lock's hash moved, its slot's fence counter not yet.
	m.move(keys.Lock)
	assert.NoError(t, lease.Refresh(ctx, slack.D(10*time.Second)), "refresh with the lock on the target (ASK)")
	_, err = c.TryAcquire(short(), key)
	t.Logf("a third client's attempt with the slot's keys split: %v", err)
	if !errors.Is(err, distlock.ErrNotAcquired) && !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("third client with the keys split: %v, want ErrNotAcquired or ErrUnavailable", err)
	}

	// Stage 3: every key moved, the slot assigned to the target.
	m.finish()
	assert.NoError(t, lease.Refresh(ctx, slack.D(10*time.Second)), "refresh after the move (MOVED)")
	select {
	case r := <-waiter:
		t.Fatalf("the waiter returned while the lock was held: %v", r.err)
	default:
	}
	require.NoError(t, lease.Release(ctx), "release after the move")
	select {
	case r := <-waiter:
		require.NoError(t, r.err, "waiter")
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

// slotMasters returns clients of the master that serves key and of
// another master of cluster (a cluster without replicas).
func slotMasters(t *testing.T, ctx context.Context, cluster *testserver.Cluster, key string) (src, dst *goredis.Client) {
	t.Helper()
	admin := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cluster.Addrs()})
	defer func() { _ = admin.Close() }()
	m, err := admin.MasterForKey(ctx, key)
	require.NoError(t, err)
	for _, addr := range cluster.Addrs() {
		if addr != m.Options().Addr {
			return adminClient(t, m.Options().Addr), adminClient(t, addr)
		}
	}
	t.Fatal("a cluster of one node")
	return nil, nil
}

// slotMigration moves one Cluster slot from one master to another by
// hand, a stage at a time, as redis-cli --cluster reshard does.
type slotMigration struct {
	t            *testing.T
	ctx          context.Context
	cluster      *testserver.Cluster
	slot         int
	src, dst     *goredis.Client
	srcID, dstID string
}

func newSlotMigration(t *testing.T, ctx context.Context, cluster *testserver.Cluster, slot int, src, dst *goredis.Client) *slotMigration {
	t.Helper()
	m := &slotMigration{t: t, ctx: ctx, cluster: cluster, slot: slot, src: src, dst: dst}
	var err error
	if m.srcID, err = src.Do(ctx, "CLUSTER", "MYID").Text(); err != nil {
		t.Fatalf("CLUSTER MYID: %v", err)
	}
	if m.dstID, err = dst.Do(ctx, "CLUSTER", "MYID").Text(); err != nil {
		t.Fatalf("CLUSTER MYID: %v", err)
	}
	return m
}

func (m *slotMigration) must(what string, err error) {
	m.t.Helper()
	if err != nil {
		m.t.Fatalf("slot %d: %s: %v", m.slot, what, err)
	}
}

// begin marks the slot IMPORTING on the target, then MIGRATING on the
// source: its keys are all still on the source.
func (m *slotMigration) begin() {
	m.t.Helper()
	m.must("IMPORTING", m.dst.Do(m.ctx, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.srcID).Err())
	m.must("MIGRATING", m.src.Do(m.ctx, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.dstID).Err())
}

// move migrates keys of the slot to the target.
func (m *slotMigration) move(keys ...string) {
	m.t.Helper()
	host, port, _ := strings.Cut(m.dst.Options().Addr, ":")
	args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	m.must("MIGRATE", m.src.Do(m.ctx, args...).Err())
}

// finish migrates the slot's remaining keys and assigns the slot to the
// target on every node: the target first, then the source (as Redis's
// cluster specification orders it).
func (m *slotMigration) finish() {
	m.t.Helper()
	m.moveRest()
	m.assign(m.dst.Options().Addr, m.src.Options().Addr)
	var others []string
	for _, addr := range m.cluster.Addrs() {
		if addr != m.dst.Options().Addr && addr != m.src.Options().Addr {
			others = append(others, addr)
		}
	}
	m.assign(others...)
}

// moveRest migrates the slot's remaining keys to the target.
func (m *slotMigration) moveRest() {
	m.t.Helper()
	for range 100 {
		ks, err := m.src.ClusterGetKeysInSlot(m.ctx, m.slot, 100).Result()
		m.must("GETKEYSINSLOT", err)
		if len(ks) == 0 {
			return
		}
		m.move(ks...)
	}
	m.t.Fatalf("slot %d: keys left after 100 MIGRATEs", m.slot)
}

// assign assigns the slot to the target on the nodes at addrs.
func (m *slotMigration) assign(addrs ...string) {
	m.t.Helper()
	for _, addr := range addrs {
		m.must("SETSLOT NODE", adminClient(m.t, addr).Do(m.ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.dstID).Err())
	}
}
