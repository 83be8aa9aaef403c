package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// confTTL is the shortest TTL the expiry checks use: Redis honours
// milliseconds, the margin is for a loaded 2-core machine under -race,
// and grows with DISTLOCK_TEST_SLACK (an auto-refreshed lease is lost when
// a scheduler stall outlasts it).
var confTTL = slack.D(400 * time.Millisecond)

// expireFault deletes the lock key directly, bypassing the owner check, as
// an expiry while the holder is paused would.
func expireFault(admin goredis.UniversalClient, prefix string) func(ctx context.Context, key string) error {
	return func(ctx context.Context, key string) error {
		n, err := admin.Del(ctx, redislua.KeysFor(prefix, key).Lock).Result()
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("lock key of %q not present", key)
		}
		return nil
	}
}

// TestConformance runs the whole suite, fault checks included, against one
// redis-server with AOF appendfsync always (so that a restart keeps locks
// and the fencing counter, which the server-faults check relies on),
// opening every Locker by URL (each with its own client and connections).
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, singleServerHarness(t, "redis", "prefix=conf:", "conf:",
		"redis://127.0.0.1:6379/notadb", "redis://a:1,b:2/0", "redis://127.0.0.1:6379/0?prefix=x&prefix=y", "redis://127.0.0.1:6379/0?subscribe_timeout=soon"))
}

// TestConformanceFair runs the suite against Lockers made with fair=true:
// the queue in Redis must keep every promise of the plain mode and add
// arrival order across Lockers (the suite's Fair check).
func TestConformanceFair(t *testing.T) {
	t.Parallel()
	conformance.Run(t, singleServerHarness(t, "redis-fair", "fair=true&prefix=fair:", "fair:", "redis://127.0.0.1:6379/0?fair=maybe"))
}

// singleServerHarness is the harness of TestConformance and
// TestConformanceFair: Lockers opened by URL with query (whose keys start
// with prefix) on an AOF-always server, every fault hook, a second server
// as the fenced store.
func singleServerHarness(t *testing.T, name, query, prefix string, badURLs ...string) conformance.Harness {
	srv := testserver.Redis(t, testserver.RedisConfig{Persistence: true})
	fencedSrv := testserver.Redis(t, testserver.RedisConfig{})
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	url := func(addr string) string { return "redis://" + addr + "/0?" + query }
	return conformance.Harness{
		Name: name,
		NewLocker: func(ctx context.Context) (*distlock.Locker, error) {
			return distlock.Open(ctx, url(srv.Addr()))
		},
		TTL:            confTTL,
		URL:            url(srv.Addr()),
		FencedRedis:    fencedSrv.Addr(),
		UnreachableURL: url("127.0.0.1:1"),
		BadURLs:        badURLs,
		BadTTLs:        []time.Duration{time.Nanosecond, time.Microsecond, 1500 * time.Microsecond},
		Faults: conformance.Faults{
			Expire:          expireFault(admin, prefix),
			NewLinkedLocker: linkedLocker(srv.Addr(), url),
			StopBackend:     func(context.Context) error { return srv.Kill() },
			StartBackend:    srv.Restart,
			Held:            heldLocks(admin, prefix),
			ServerFaults:    restartFault(srv),
		},
	}
}

// restartFault kills an AOF-always server and restarts it.
func restartFault(srv *testserver.Server) []conformance.ServerFault {
	return []conformance.ServerFault{{
		Name: "redis killed and restarted (AOF always)",
		Inject: func(ctx context.Context) (func(context.Context) error, error) {
			return srv.Restart, srv.Kill()
		},
	}}
}

// linkedLocker opens Lockers by URL through a fault proxy in front of addr.
func linkedLocker(addr string, url func(addr string) string) func(ctx context.Context) (*distlock.Locker, conformance.Link, error) {
	return func(ctx context.Context) (*distlock.Locker, conformance.Link, error) {
		g, err := netfault.ListenGroup(addr)
		if err != nil {
			return nil, nil, err
		}
		l, err := distlock.Open(ctx, url(g.Addrs()[0]))
		if err != nil {
			_ = g.Close()
			return nil, nil, err
		}
		return l, g, nil
	}
}

// heldLocks lists the lock hashes under prefix (not the fencing counters).
func heldLocks(admin goredis.UniversalClient, prefix string) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		var held []string
		iter := admin.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			typ, err := admin.Type(ctx, k).Result()
			if err != nil {
				return nil, err
			}
			if typ != "hash" {
				continue
			}
			owner, err := admin.HGet(ctx, k, "o").Result()
			if errors.Is(err, goredis.Nil) {
				continue // a fair queue's waiter entries, not a lock
			}
			if err != nil {
				return nil, err
			}
			held = append(held, k+" owner="+owner)
		}
		return held, iter.Err()
	}
}

// TestConformanceCluster runs the whole suite, fault checks included,
// against a Redis Cluster of three masters with one replica each, every
// node with AOF appendfsync always (its own, since the faults stop and
// restart its nodes), opening every Locker by redis+cluster:// URL, worker
// processes included: every lock's keys must share a slot, and wake-ups
// must cross nodes. Per-link faults pass every node connection of one
// client through its own proxy. The replicas do not fail over
// (cluster-replica-no-failover): a master killed by a fault comes back
// with its AOF, as without replicas; a failover, which can lose grants,
// is the failover tests' subject.
func TestConformanceCluster(t *testing.T) {
	testserver.SkipShort(t, "redis cluster")
	t.Parallel()
	cluster := testserver.RedisClusterWith(t, testserver.ClusterConfig{Masters: 3, Replicas: 1, Persistence: true})
	masters, err := noFailover(tctx(t, time.Minute), cluster)
	require.NoError(t, err)
	require.Len(t, masters, 3, "%d masters, want 3", len(masters))
	addrs := cluster.Addrs()
	admin := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = admin.Close() })
	const prefix = "ccf:"
	url := "redis+cluster://" + strings.Join(addrs, ",") + "/?prefix=" + prefix
	fencedSrv := testserver.Redis(t, testserver.RedisConfig{})
	conformance.Run(t, conformance.Harness{
		Name: "redis-cluster",
		NewLocker: func(ctx context.Context) (*distlock.Locker, error) {
			return distlock.Open(ctx, url)
		},
		TTL:            confTTL,
		URL:            url,
		FencedRedis:    fencedSrv.Addr(),
		UnreachableURL: "redis+cluster://127.0.0.1:1/?prefix=" + prefix,
		BadURLs:        []string{"redis+cluster://a:1,b:2/3", "redis+cluster://a:1?nosuch=1"},
		BadTTLs:        []time.Duration{time.Nanosecond, time.Microsecond, 1500 * time.Microsecond},
		Faults: conformance.Faults{
			Expire:          expireFault(admin, prefix),
			NewLinkedLocker: clusterLinkedLocker(url),
			StopBackend:     func(context.Context) error { return stopCluster(cluster) },
			StartBackend: func(ctx context.Context) error {
				if err := startCluster(ctx, cluster); err != nil {
					return err
				}
				_, err := noFailover(ctx, cluster)
				return err
			},
			Held: clusterHeld(admin, prefix),
			ServerFaults: []conformance.ServerFault{{
				Name: "every redis cluster master killed and restarted in turn (AOF always)",
				Inject: func(ctx context.Context) (func(context.Context) error, error) {
					// Kill one master; heal restarts it and kills the next.
					return restartEach(masters), masters[0].Kill()
				},
			}},
		},
	})
}

// restartEach returns a heal that restarts the killed masters[0], then
// kills and restarts each other master in turn.
func restartEach(masters []*testserver.Server) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := masters[0].Restart(ctx); err != nil {
			return err
		}
		for _, s := range masters[1:] {
			if err := s.Kill(); err != nil {
				return err
			}
			if err := s.Restart(ctx); err != nil {
				return err
			}
		}
		return nil
	}
}

// noFailover forbids every replica of cluster to fail its master over
// (CONFIG SET cluster-replica-no-failover yes: a restart forgets it),
// and spares the disk their fsync on every write (appendfsync no: a
// replica that is never promoted gets its data back from its master), and
// returns the masters.
func noFailover(ctx context.Context, cluster *testserver.Cluster) ([]*testserver.Server, error) {
	var masters []*testserver.Server
	for _, s := range cluster.Servers {
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
		role, err := c.Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "slave" {
			err = c.ConfigSet(ctx, "cluster-replica-no-failover", "yes").Err()
			if err == nil {
				err = c.ConfigSet(ctx, "appendfsync", "no").Err()
			}
		} else if err == nil {
			masters = append(masters, s)
		}
		_ = c.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Addr(), err)
		}
	}
	return masters, nil
}

// stopCluster kills every node.
func stopCluster(c *testserver.Cluster) error {
	var errs []error
	for _, s := range c.Servers {
		errs = append(errs, s.Kill())
	}
	return errors.Join(errs...)
}

// startCluster restarts every node with its data and waits until the
// cluster serves.
func startCluster(ctx context.Context, c *testserver.Cluster) error {
	for _, s := range c.Servers {
		if err := s.RestartNoWait(); err != nil {
			return err
		}
	}
	return c.WaitReady(ctx)
}

// clusterLinkedLocker opens Lockers from url whose every node connection
// (those to nodes the slot map names included) passes through one proxy
// per node, together the returned Link.
func clusterLinkedLocker(raw string) func(ctx context.Context) (*distlock.Locker, conformance.Link, error) {
	return func(ctx context.Context) (*distlock.Locker, conformance.Link, error) {
		u, err := backend.ParseURL(raw)
		if err != nil {
			return nil, nil, err
		}
		opt, opts, err := parseClusterURL(u)
		if err != nil {
			return nil, nil, err
		}
		g, dial, err := proxiedDialer(opt.Addrs)
		if err != nil {
			return nil, nil, err
		}
		opt.Dialer = dial
		drv, err := openDriver(goredis.NewClusterClient(opt), opts)
		if err != nil {
			_ = g.Close()
			return nil, nil, err
		}
		return distlock.New(drv, "redis+cluster"), g, nil
	}
}

// proxiedDialer starts one fault proxy per target and returns them as one
// Link, with a dialer that reaches each target through its proxy and
// refuses any other address (a connection that bypassed the Link would
// escape its faults).
func proxiedDialer(targets []string) (*netfault.Group, func(ctx context.Context, network, addr string) (net.Conn, error), error) {
	g, err := netfault.ListenGroup(targets...)
	if err != nil {
		return nil, nil, err
	}
	via := map[string]string{}
	for i, a := range targets {
		via[a] = g.Addrs()[i]
	}
	return g, func(ctx context.Context, network, addr string) (net.Conn, error) {
		p, ok := via[addr]
		if !ok {
			return nil, fmt.Errorf("no fault link to %s", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, p)
	}, nil
}

// clusterHeld lists the lock hashes under prefix on every master.
func clusterHeld(admin *goredis.ClusterClient, prefix string) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		var (
			mu   sync.Mutex
			held []string
		)
		err := admin.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error {
			h, err := heldLocks(node, prefix)(ctx)
			mu.Lock()
			held = append(held, h...)
			mu.Unlock()
			return err
		})
		return held, err
	}
}
