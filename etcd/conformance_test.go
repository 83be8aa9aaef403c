package etcd

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// conformanceTTL is the session lease TTL of the conformance Lockers: long
// enough that a full restart of the cluster (the Durable check) fits in it,
// and that the test process, starved on a loaded machine (a load of 45 on
// two cores, with -race, its Lockers' traffic through netfault proxies in
// the same process), gets a keepalive answered within TTL − margin (4 s
// lost sessions in the mutual-exclusion check: 3.6 s without an answer);
// short enough for the session-bound checks.
const conformanceTTL = 6 * time.Second

// TestConformance runs the suite on a cluster of its own (its fault checks
// stop, restart, kill and pause members), in parallel with the tests on
// the shared cluster.
func TestConformance(t *testing.T) {
	t.Parallel()
	c := ownCluster(t)
	addrs := c.Addrs()
	prefix := uniquePrefix(t)
	admin := adminClient(t, addrs...)
	var (
		mu    sync.Mutex
		links = map[*distlock.Locker]*netfault.Group{}
	)
	linked := func() (*distlock.Locker, *netfault.Group, error) {
		link, err := netfault.ListenGroup(addrs...)
		if err != nil {
			return nil, nil, err
		}
		t.Cleanup(func() { _ = link.Close() })
		l, err := Dial(link.Addrs(), WithSessionTTL(conformanceTTL), WithPrefix(prefix))
		if err != nil {
			return nil, nil, err
		}
		return l, link, nil
	}
	h := conformance.Harness{
		Name: "etcd",
		NewLocker: func(ctx context.Context) (*distlock.Locker, error) {
			l, link, err := linked()
			if err != nil {
				return nil, err
			}
			mu.Lock()
			links[l] = link
			mu.Unlock()
			return l, nil
		},
		// A dead client's lease expires after its TTL on the leader.
		SessionTimeout: conformanceTTL + 2*time.Second,
		URL:            fmt.Sprintf("etcd://%s%s?session_ttl=%v", strings.Join(addrs, ","), prefix, conformanceTTL),
		UnreachableURL: "etcd://127.0.0.1:1/unreachable",
		BadURLs: []string{
			"etcd://127.0.0.1:2379/a/",
			"etcd://127.0.0.1:2379/a%FFb",
			"etcd://127.0.0.1:0/x",
			"etcd://127.0.0.1:2379,/x",
			"etcd:///x",
			"etcd://user@127.0.0.1:2379/x",
			"etcd://:secret@127.0.0.1:2379/x",
			"etcd://127.0.0.1:2379/x?sslrootcert=ca.pem",
			"etcds://127.0.0.1:2379/x?sslcert=client.pem",
			"etcds://127.0.0.1:2379/x?sslkey=client-key.pem",
			"etcds://127.0.0.1:2379/x?sslrootcert=/nonexistent/ca.pem",
			"etcds://user:secret@127.0.0.1:2379/x?sslrootcert=/dev/null",
			"etcd://127.0.0.1:2379/x#frag",
			"etcd://127.0.0.1:2379/x?session_ttl=0s",
			"etcd://127.0.0.1:2379/x?session_ttl=1s",
			"etcd://127.0.0.1:2379/x?session_ttl=2500ms",
			"etcd://127.0.0.1:2379/x?session_ttl=soon",
			"etcd://127.0.0.1:2379/x?session_ttl=10s&session_ttl=20s",
			"etcd://127.0.0.1:2379/x?session_margin=-1s",
			"etcd://127.0.0.1:2379/x?session_ttl=2s&session_margin=1s",
			"etcd://127.0.0.1:2379/x?connect_timeout=-3s",
			"etcd://127.0.0.1:2379/x?ttl=1s",
			"etcd://127.0.0.1:2379/x?hold_watch=maybe",
		},
		Faults: conformance.Faults{
			// Delete the holder's key with another client.
			Expire: func(ctx context.Context, key string) error {
				resp, err := admin.Get(ctx, prefix+"/"+escapeKey(key)+"/", clientv3.WithFirstCreate()...)
				if err != nil {
					return err
				}
				if len(resp.Kvs) == 0 {
					return fmt.Errorf("no waiter key for %q", key)
				}
				_, err = admin.Delete(ctx, string(resp.Kvs[0].Key))
				return err
			},
			// A crash as the network sees it: nothing passes any more,
			// and the lease expires on the cluster.
			KillClient: func(l *distlock.Locker) error {
				mu.Lock()
				link := links[l]
				mu.Unlock()
				if link == nil {
					return errors.New("unknown Locker")
				}
				link.Blackhole()
				return nil
			},
			NewLinkedLocker: func(ctx context.Context) (*distlock.Locker, conformance.Link, error) {
				l, link, err := linked()
				if err != nil {
					return nil, nil, err
				}
				return l, link, nil
			},
			Held: func(ctx context.Context) ([]string, error) { return waiterKeys(ctx, admin, prefix) },
		},
	}
	if c.Controllable() {
		h.Faults.RestartBackend = func(ctx context.Context) error {
			start := time.Now()
			err := stopCluster(c)
			if err == nil {
				err = startCluster(ctx, c)
			}
			t.Logf("cluster restarted in %v", time.Since(start).Round(time.Millisecond))
			return err
		}
		h.Faults.StopBackend = func(context.Context) error { return stopCluster(c) }
		h.Faults.StartBackend = func(ctx context.Context) error { return startCluster(ctx, c) }
		h.Faults.ServerFaults = serverFaults(c)
		if _, err := exec.LookPath("redis-server"); err == nil {
			h.FencedRedis = testserver.Redis(t, testserver.RedisConfig{}).Addr()
		}
	}
	conformance.Run(t, h)

	// Nothing left behind: every waiter key is gone.
	waitFor(t, 30*time.Second, "no waiter key left under "+prefix, func() bool {
		keys, err := waiterKeys(t.Context(), admin, prefix)
		return err == nil && len(keys) == 0
	})
}

// serverFaults are the member faults of the server-faults check.
func serverFaults(c *testserver.Cluster) []conformance.ServerFault {
	member := func(pick func(context.Context, *testserver.Cluster) (*testserver.Server, error), pause bool) func(ctx context.Context) (func(context.Context) error, error) {
		return func(ctx context.Context) (func(context.Context) error, error) {
			s, err := pick(ctx, c)
			if err != nil {
				return nil, err
			}
			if pause {
				if err := s.Pause(); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error {
					if err := s.Resume(); err != nil {
						return err
					}
					return c.WaitReady(ctx)
				}, nil
			}
			if err := s.Kill(); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error { return s.Restart(ctx) }, nil
		}
	}
	return []conformance.ServerFault{
		{Name: "kill-leader", Inject: member(testserver.EtcdLeader, false)},
		{Name: "pause-leader", Inject: member(testserver.EtcdLeader, true)},
		{Name: "kill-follower", Inject: member(testserver.EtcdFollower, false)},
	}
}

func stopCluster(c *testserver.Cluster) error {
	for _, s := range c.Servers {
		if err := s.Kill(); err != nil {
			return err
		}
	}
	return nil
}

func startCluster(ctx context.Context, c *testserver.Cluster) error {
	for _, s := range c.Servers {
		if err := s.RestartNoWait(); err != nil {
			return err
		}
	}
	return c.WaitReady(ctx)
}
