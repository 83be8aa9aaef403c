package redis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failoverTopo is a replicated deployment the failover tests act on: a
// Sentinel-managed set or a Redis Cluster with replicas.
type failoverTopo struct {
	name string
	// url opens a Locker with the extra query.
	url func(query string) string
	// nodes returns the node serving key and its replicas.
	nodes func(ctx context.Context, key string) (primary *testserver.Server, replicas []*testserver.Server, err error)
	// promoted waits until one of replicas has replaced primary.
	promoted func(ctx context.Context, primary *testserver.Server, replicas []*testserver.Server) error
	// rejoin brings the killed primary back, as a replica.
	rejoin func(ctx context.Context, old *testserver.Server) error
}

// failoverRound is what one failover round measured.
type failoverRound struct {
	double    bool          // b was granted while a's lease was still valid
	survived  bool          // a's grant was on the promoted replica: b found it held
	promoted  time.Duration // primary killed → a replica promoted
	failover  time.Duration // primary killed → b granted
	overlap   time.Duration // b granted → a's lease reported lost (or its TTL ended)
	tokA      uint64        // a's token (0: a was not granted)
	tokB      uint64        // b's token
	tokBefore uint64        // the last token granted before the round
	errA      error         // a's acquisition error
}

func (r failoverRound) String() string {
	return fmt.Sprintf("double grant %v (first grant survived %v); kill → replica promoted %v; kill → second grant %v; overlap (second grant → first lease lost) %v; tokens before %d, first %d, second %d; first's error: %v",
		r.double, r.survived, r.promoted.Round(time.Millisecond), r.failover.Round(time.Millisecond), r.overlap.Round(time.Millisecond), r.tokBefore, r.tokA, r.tokB, r.errA)
}

// runFailover runs one round on key: a takes and releases the lock (a
// replicated token), then takes it again with the primary's replica links
// cut first when unreplicated (the replicas paused, their connections
// killed on the primary: the grant reaches no replica; no automatic
// refresh), or right before the kill otherwise (auto-refreshed); the
// primary is killed, a replica promoted, and b acquires.
func runFailover(t *testing.T, topo failoverTopo, query, key string, unreplicated bool) failoverRound {
	t.Helper()
	ctx := tctx(t, 3*time.Minute)
	open := func() *distlock.Locker {
		l, err := distlock.Open(ctx, topo.url(query))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	a, b := open(), open()
	// Longer than a failover (a Cluster promotes after its node timeout,
	// 2s, and an election), so that the first lease outlives it.
	ttl := slack.D(10 * time.Second)
	var r failoverRound
	first, err := a.TryAcquire(ctx, key, distlock.WithTTL(ttl), distlock.WithAutoRefresh(false))
	require.NoError(t, err, "%s: first acquisition", topo.name)
	r.tokBefore = first.Token()
	require.NoError(t, first.Release(ctx))
	primary, replicas, err := topo.nodes(ctx, key)
	require.NoError(t, err)
	if unreplicated {
		resumed := false
		resume := func() {
			resumed = true
			for _, n := range replicas {
				assert.NoError(t, n.Resume())
			}
		}
		defer func() {
			if !resumed {
				resume()
			}
		}()
		for _, n := range replicas {
			require.NoError(t, n.Pause())
		}
		admin := goredis.NewClient(&goredis.Options{Addr: primary.Addr()})
		err := admin.ClientKillByFilter(ctx, "TYPE", "replica").Err()
		_ = admin.Close()
		require.NoError(t, err)
		// No automatic refresh: the lease stays valid in its holder's
		// eyes until its TTL, as between two refreshes, so that a
		// second grant within the TTL is a double grant whatever the
		// refresh schedule.
		la, err := a.TryAcquire(ctx, key, distlock.WithTTL(ttl), distlock.WithAutoRefresh(false))
		r.errA = err
		if err == nil {
			r.tokA = la.Token()
			t.Cleanup(func() { _ = la.Release(context.Background()) })
		}
		require.NoError(t, primary.Kill())
		resume()
		r.runSecond(t, ctx, topo, b, key, ttl, la, primary, replicas)
	} else {
		la, err := a.TryAcquire(ctx, key, distlock.WithTTL(ttl))
		r.errA = err
		if err == nil {
			r.tokA = la.Token()
			t.Cleanup(func() { _ = la.Release(context.Background()) })
		}
		require.NoError(t, primary.Kill())
		r.runSecond(t, ctx, topo, b, key, ttl, la, primary, replicas)
	}
	require.NoError(t, topo.rejoin(ctx, primary), "rejoin %s", primary)
	return r
}

// runSecond waits for the promotion, then has b acquire key (retrying
// while the client has not found the new primary) and measures.
func (r *failoverRound) runSecond(t *testing.T, ctx context.Context, topo failoverTopo, b *distlock.Locker, key string, ttl time.Duration, la *distlock.Lease, primary *testserver.Server, replicas []*testserver.Server) {
	t.Helper()
	killed := time.Now()
	require.NoError(t, topo.promoted(ctx, primary, replicas))
	r.promoted = time.Since(killed)
	var (
		lb  *distlock.Lease
		err error
	)
	for range 400 {
		actx, cancel := context.WithTimeout(ctx, slack.D(5*time.Second))
		lb, err = b.TryAcquire(actx, key, distlock.WithTTL(ttl))
		cancel()
		if err == nil || !errors.Is(err, distlock.ErrUnavailable) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the client rediscovers the primary
	}
	if errors.Is(err, distlock.ErrNotAcquired) {
		if la != nil {
			select {
			case <-la.Done():
			default:
				r.survived = true // the grant was replicated: a still holds it
				r.failover = time.Since(killed)
				return
			}
		}
		// Taken by a grant a gave up (refused, or lost): it expires.
		actx, cancel := context.WithTimeout(ctx, ttl+slack.D(5*time.Second))
		lb, err = b.Acquire(actx, key, distlock.WithTTL(ttl))
		cancel()
	}
	require.NoError(t, err, "%s: second acquisition after failover", topo.name)
	granted := time.Now()
	r.failover = granted.Sub(killed)
	r.tokB = lb.Token()
	defer func() { _ = lb.Release(context.Background()) }()
	if la == nil {
		return
	}
	select {
	case <-la.Done():
		return // a knew it had lost the lock before b got it
	default:
	}
	r.double = true
	select {
	case <-la.Done():
		r.overlap = time.Since(granted)
	case <-time.After(ttl + slack.D(5*time.Second)):
		t.Errorf("%s: the first lease never reported its loss", topo.name)
	}
}

// sentinelTopo is a Sentinel set with two replicas (one is left, for
// wait_replicas=1, while the failed primary is down).
func sentinelTopo(t *testing.T) failoverTopo {
	set := testserver.RedisSentinel(t, testserver.SentinelConfig{Replicas: 2, Sentinels: 3})
	return failoverTopo{
		name: "sentinel",
		url:  set.URL,
		nodes: func(ctx context.Context, _ string) (*testserver.Server, []*testserver.Server, error) {
			p, err := set.Primary(ctx)
			if err != nil {
				return nil, nil, err
			}
			var replicas []*testserver.Server
			for _, n := range set.Nodes {
				if n != p {
					replicas = append(replicas, n)
				}
			}
			return p, replicas, nil
		},
		promoted: func(ctx context.Context, primary *testserver.Server, _ []*testserver.Server) error {
			_, err := set.WaitPrimaryChange(ctx, primary.Addr())
			return err
		},
		rejoin: set.Rejoin,
	}
}

// clusterTopo is a Redis Cluster of 3 masters with two replicas each.
func clusterTopo(t *testing.T) failoverTopo {
	cluster := testserver.RedisClusterWith(t, testserver.ClusterConfig{Masters: 3, Replicas: 2})
	byAddr := map[string]*testserver.Server{}
	for _, s := range cluster.Servers {
		byAddr[s.Addr()] = s
	}
	// slotNodes returns the master of key's slot and its replicas as
	// every running node reports them (a restarted node reports its old
	// view until the cluster's gossip corrects it), waiting for agreement.
	slotNodes := func(ctx context.Context, key string) (*testserver.Server, []*testserver.Server, error) {
		slot := redislua.Slot(redislua.KeysFor(redislua.DefaultPrefix, key).Lock)
		for {
			view, err := agreedSlot(ctx, cluster, slot)
			if err == nil && len(view) == 3 {
				return byAddr[view[0]], []*testserver.Server{byAddr[view[1]], byAddr[view[2]]}, nil
			}
			select {
			case <-ctx.Done():
				return nil, nil, fmt.Errorf("slot %d: no agreed master with two replicas: %w (last: %v %v)", slot, ctx.Err(), view, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return failoverTopo{
		name:  "cluster",
		url:   func(q string) string { return "redis+cluster://" + strings.Join(cluster.Addrs(), ",") + "/?" + q },
		nodes: slotNodes,
		promoted: func(ctx context.Context, _ *testserver.Server, replicas []*testserver.Server) error {
			for {
				for _, n := range replicas {
					c := goredis.NewClient(&goredis.Options{Addr: n.Addr()})
					info, err := c.Info(ctx, "replication").Result()
					_ = c.Close()
					if err == nil && strings.Contains(info, "role:master") {
						return nil
					}
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("no replica promoted: %w", ctx.Err())
				case <-time.After(50 * time.Millisecond):
				}
			}
		},
		rejoin: func(ctx context.Context, old *testserver.Server) error {
			if err := old.Restart(ctx); err != nil {
				return err
			}
			c := goredis.NewClient(&goredis.Options{Addr: old.Addr()})
			defer c.Close()
			for {
				info, err := c.Info(ctx, "replication").Result()
				if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
					// Back as a replica: wait until every node agrees.
					return testserver.WaitClusterReplicas(ctx, cluster, 2)
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("%s not back as a replica: %w", old, ctx.Err())
				case <-time.After(50 * time.Millisecond):
				}
			}
		},
	}
}

// agreedSlot returns the master of slot and its replicas (sorted) as every
// running node of the cluster reports them, or an error if they differ.
func agreedSlot(ctx context.Context, cluster *testserver.Cluster, slot int) ([]string, error) {
	var agreed []string
	for _, s := range cluster.Servers {
		if s.PID() == 0 {
			continue
		}
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
		ranges, err := c.ClusterSlots(ctx).Result()
		_ = c.Close()
		if err != nil {
			return nil, err
		}
		var view []string
		for _, r := range ranges {
			if slot >= r.Start && slot <= r.End {
				for _, n := range r.Nodes {
					view = append(view, n.Addr)
				}
				slices.Sort(view[1:])
			}
		}
		if agreed != nil && !slices.Equal(agreed, view) {
			return nil, fmt.Errorf("nodes disagree on slot %d: %v and %v", slot, agreed, view)
		}
		agreed = view
	}
	return agreed, nil
}

// TestFailoverDoubleGrant: Redis replication is asynchronous. A lock
// granted on a primary whose replica never received it is granted again
// by the replica promoted when the primary dies, while the first lease
// still looks valid to its holder, and the promoted replica reissues
// the same fencing token. With wait_replicas=1 the first grant is
// refused (ErrNotReplicated) instead, and the token after the failover
// is above every token granted before it.
func TestFailoverDoubleGrant(t *testing.T) {
	testserver.SkipShort(t, "redis sentinel and cluster")
	t.Parallel()
	for _, topo := range []struct {
		name string
		mk   func(*testing.T) failoverTopo
	}{{"sentinel", sentinelTopo}, {"cluster", clusterTopo}} {
		t.Run(topo.name, func(t *testing.T) {
			// Not conformance.Parallel: a failover waits on sentinel and
			// cluster timers for most of a minute, on servers of its own,
			// using little CPU; holding the suites' Alone checks off for
			// that long would leave the package idle.
			t.Parallel()
			failoverDoubleGrant(t, topo.mk(t))
		})
	}
}

// failoverDoubleGrant runs TestFailoverDoubleGrant's two failovers on
// topo, one after the other.
func failoverDoubleGrant(t *testing.T, topo failoverTopo) {
	t.Run("async", func(t *testing.T) {
		r := runFailover(t, topo, "", "fo-async", true)
		t.Logf("%s, unreplicated grant, no WAIT: %v", topo.name, r)
		require.NoError(t, r.errA, "first grant")
		assert.True(t, r.double, "no double grant: the unreplicated grant survived the failover?")
		if r.tokB > r.tokA {
			t.Errorf("token %d after the failover, above the lost grant's %d: the lost INCR was replicated?", r.tokB, r.tokA)
		}
	})
	t.Run("wait", func(t *testing.T) {
		r := runFailover(t, topo, "wait_replicas=1&wait_timeout=200ms", "fo-wait", true)
		t.Logf("%s, unreplicated grant, wait_replicas=1: %v", topo.name, r)
		if !errors.Is(r.errA, ErrNotReplicated) || !errors.Is(r.errA, distlock.ErrUnavailable) {
			t.Errorf("first grant: %v, want ErrNotReplicated (ErrUnavailable)", r.errA)
		}
		assert.False(t, r.double, "double grant with wait_replicas=1")
		if r.tokB <= r.tokBefore {
			t.Errorf("token %d after the failover, not above the confirmed %d", r.tokB, r.tokBefore)
		}
	})
}

// TestFailoverRate measures how often a grant made just before the
// primary is killed (no pause, no cut link: replication as it runs) is
// granted again after the failover, per topology and setting: it runs
// DISTLOCK_FAILOVER_ROUNDS rounds of each (a round takes 10-30s), and
// only when that is set.
func TestFailoverRate(t *testing.T) {
	testserver.SkipShort(t, "redis sentinel and cluster")
	rounds, err := strconv.Atoi(os.Getenv("DISTLOCK_FAILOVER_ROUNDS"))
	if err != nil || rounds <= 0 {
		t.Skip("set DISTLOCK_FAILOVER_ROUNDS=n to measure n failovers per topology and setting")
	}
	for _, mk := range []func(*testing.T) failoverTopo{sentinelTopo, clusterTopo} {
		topo := mk(t)
		for _, q := range []string{"", "wait_replicas=1&wait_timeout=200ms"} {
			double, refused, survived := 0, 0, 0
			var fo, overlap time.Duration
			for i := range rounds {
				r := runFailover(t, topo, q, fmt.Sprintf("rate-%d-%d", len(q), i), false)
				if r.errA != nil {
					refused++
				}
				if r.survived {
					survived++
				}
				if r.double {
					double++
					overlap += r.overlap
				}
				fo += r.failover
				if q != "" && r.double {
					t.Errorf("%s %q round %d: double grant: %v", topo.name, q, i, r)
				}
			}
			avgOverlap := time.Duration(0)
			if double > 0 {
				avgOverlap = overlap / time.Duration(double)
			}
			t.Logf("%s, query %q: %d rounds: %d double grants (mean overlap %v), %d first grants survived the failover, %d refused; mean kill → second client's answer %v",
				topo.name, q, rounds, double, avgOverlap.Round(time.Millisecond), survived, refused, (fo / time.Duration(rounds)).Round(time.Millisecond))
		}
	}
}
