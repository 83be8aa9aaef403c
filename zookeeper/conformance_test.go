package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// conformanceSession is the session timeout of the conformance Lockers.
// The session-bound checks wait for a dead client's session to expire, so
// it sets their pace; it stays well above what a loaded machine takes to
// re-elect a leader (server-faults) and above heartbeat jitter.
const conformanceSession = 6 * time.Second

// durableSession is the session timeout of the Durable check's Lockers: a
// full restart of the ensemble must fit in it (less the loss margin), so
// that the holder's session survives. The restart took 7.5s on a loaded
// machine, and 21.8s on a heavily loaded one, which a 12s session did not
// survive; this is the most the test servers grant (maxSessionTimeout).
// The check waits for no session to expire, so it costs no time.
const durableSession = 60 * time.Second

// TestConformance runs while the package's other parallel tests do, and
// TestConformanceDurable, on the same ensemble: its Alone checks (the
// backend-down check counts the process's goroutines; Durable restarts the
// ensemble) one at a time, with no other test running (see
// conformance.Parallel).
func TestConformance(t *testing.T) {
	t.Parallel()
	c := ensemble(t)
	h, base := conformanceHarness(t, c, conformanceSession)
	h.Faults.RestartBackend = nil // TestConformanceDurable, with a longer session
	conformance.Run(t, h)
	noLockNodeLeft(t, c, base)
}

// TestConformanceDurable is the Durable check alone, on Lockers whose
// session outlasts a full restart of the ensemble.
func TestConformanceDurable(t *testing.T) {
	t.Parallel()
	c := ensemble(t)
	h, base := conformanceHarness(t, c, durableSession)
	if h.Faults.RestartBackend == nil {
		t.Skip("the ensemble cannot be restarted")
	}
	for _, r := range conformance.RunChecks(t.Context(), h, conformance.Options{Match: regexp.MustCompile(`^durable$`), Destructive: true}) {
		t.Logf("%s: %s in %v %s", r.Name, r.Status, r.Duration.Round(time.Millisecond), r.Message)
		if r.Status != conformance.Pass {
			t.Errorf("%s: %s: %s", r.Name, r.Status, r.Message)
		}
	}
	noLockNodeLeft(t, c, base)
}

// conformanceHarness is the harness over the shared ensemble c, its
// Lockers on session timeout session and base, a base path of the test's
// own.
func conformanceHarness(t *testing.T, c *testserver.Cluster, session time.Duration) (h conformance.Harness, base string) {
	addrs := c.Addrs()
	base = uniqueBase(t)
	admin := adminConn(t, addrs...)
	var (
		mu      sync.Mutex
		victims = map[*distlock.Locker]*faults{}
	)
	h = conformance.Harness{
		Name: "zookeeper",
		NewLocker: func(ctx context.Context) (*distlock.Locker, error) {
			f := &faults{}
			l, err := Dial(addrs, WithSessionTimeout(session), WithDialer(f.dial),
				WithLogger(DiscardLogger), WithBasePath(base))
			if err != nil {
				return nil, err
			}
			mu.Lock()
			victims[l] = f
			mu.Unlock()
			return l, nil
		},
		// A dead client's session expires after its timeout; the
		// server's expiry runs on tick boundaries.
		SessionTimeout: session + time.Second,
		URL:            fmt.Sprintf("zookeeper://%s%s?session_timeout=%v", strings.Join(addrs, ","), base, session),
		UnreachableURL: "zookeeper://127.0.0.1:1/unreachable",
		BadURLs: []string{
			"zookeeper://127.0.0.1:2181/a//b",
			"zookeeper://127.0.0.1:2181/a/../b",
			"zookeeper://127.0.0.1:2181/zookeeper/locks",
			"zookeeper://127.0.0.1:2181/a/",
			"zookeeper://127.0.0.1:2181/%F0%9F%94%92",
			"zookeeper://127.0.0.1:2181/a%01b",
			"zookeeper://127.0.0.1:0/x",
			"zookeeper://127.0.0.1:2181,/x",
			"zookeeper:///x",
			"zookeeper://user:secret@127.0.0.1:2181/x",
			"zookeeper://127.0.0.1:2181/x#frag",
			"zookeeper://127.0.0.1:2181/x?session_timeout=0s",
			"zookeeper://127.0.0.1:2181/x?session_timeout=soon",
			"zookeeper://127.0.0.1:2181/x?session_timeout=10s&session_timeout=20s",
			"zookeeper://127.0.0.1:2181/x?session_margin=-1s",
			"zookeeper://127.0.0.1:2181/x?session_timeout=2s&session_margin=1s",
			"zookeeper://127.0.0.1:2181/x?loss_policy=sometimes",
			"zookeeper://127.0.0.1:2181/x?connect_timeout=-3s",
			"zk://127.0.0.1:2181/x?ttl=1s",
		},
		Faults: conformance.Faults{
			// Delete the holder's node with another client.
			Expire: func(ctx context.Context, key string) error {
				nodes := lockNodes(t, admin, base, key)
				if len(nodes) == 0 {
					return fmt.Errorf("no lock node for %q", key)
				}
				return admin.Delete(base+"/"+encodeKey(key)+"/"+nodes[0], -1)
			},
			// A crash as the network sees it: nothing passes any more,
			// and the session expires on the server.
			KillClient: func(l *distlock.Locker) error {
				mu.Lock()
				f := victims[l]
				mu.Unlock()
				if f == nil {
					return errors.New("unknown Locker")
				}
				f.setBlackhole(true)
				return nil
			},
			NewLinkedLocker: func(ctx context.Context) (*distlock.Locker, conformance.Link, error) {
				link, err := netfault.ListenGroup(addrs...)
				if err != nil {
					return nil, nil, err
				}
				t.Cleanup(func() { _ = link.Close() })
				paddrs := link.Addrs()
				l, err := Dial(paddrs, WithSessionTimeout(session), WithLogger(DiscardLogger), WithBasePath(base))
				if err != nil {
					return nil, nil, err
				}
				return l, link, nil
			},
			Held: func(ctx context.Context) ([]string, error) {
				return heldNodes(admin, base)
			},
		},
	}
	if c.Controllable() {
		h.Faults.RestartBackend = func(ctx context.Context) error {
			start := time.Now()
			err := stopEnsemble(c)
			if err == nil {
				err = startEnsemble(ctx, c)
			}
			t.Logf("ensemble restarted in %v", time.Since(start).Round(time.Millisecond))
			return err
		}
		h.Faults.StopBackend = func(context.Context) error { return stopEnsemble(c) }
		h.Faults.StartBackend = func(ctx context.Context) error { return startEnsemble(ctx, c) }
		h.Faults.ServerFaults = []conformance.ServerFault{
			{Name: "kill-leader", Inject: func(ctx context.Context) (func(context.Context) error, error) {
				s, err := leaderOf(c)
				if err != nil {
					return nil, err
				}
				if err := s.Kill(); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error { return s.Restart(ctx) }, nil
			}},
			{Name: "pause-leader", Inject: func(ctx context.Context) (func(context.Context) error, error) {
				s, err := leaderOf(c)
				if err != nil {
					return nil, err
				}
				if err := s.Pause(); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error {
					if err := s.Resume(); err != nil {
						return err
					}
					return c.WaitReady(ctx)
				}, nil
			}},
			{Name: "kill-follower", Inject: func(ctx context.Context) (func(context.Context) error, error) {
				s, err := followerOf(c)
				if err != nil {
					return nil, err
				}
				if err := s.Kill(); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error { return s.Restart(ctx) }, nil
			}},
		}
		if _, err := exec.LookPath("redis-server"); err == nil {
			h.FencedRedis = testserver.Redis(t, testserver.RedisConfig{}).Addr()
		}
	}
	return h, base
}

// noLockNodeLeft waits until every lock node under h's base path is gone
// (empty containers remain until the reaper runs).
func noLockNodeLeft(t *testing.T, c *testserver.Cluster, base string) {
	admin := adminConn(t, c.Addrs()...)
	waitFor(t, 30*time.Second, "no lock node left under "+base, func() bool {
		held, err := heldNodes(admin, base)
		return err == nil && len(held) == 0
	})
}

func stopEnsemble(c *testserver.Cluster) error {
	for _, s := range c.Servers {
		if err := s.Kill(); err != nil {
			return err
		}
	}
	return nil
}

func startEnsemble(ctx context.Context, c *testserver.Cluster) error {
	for _, s := range c.Servers {
		if err := s.RestartNoWait(); err != nil {
			return err
		}
	}
	return c.WaitReady(ctx)
}

func leaderOf(c *testserver.Cluster) (*testserver.Server, error) {
	for _, s := range c.Servers {
		if m, err := srvrMode(s.Addr()); err == nil && m == "leader" {
			return s, nil
		}
	}
	return nil, errors.New("no leader")
}

func followerOf(c *testserver.Cluster) (*testserver.Server, error) {
	for _, s := range c.Servers {
		if m, err := srvrMode(s.Addr()); err == nil && m == "follower" {
			return s, nil
		}
	}
	return nil, errors.New("no follower")
}

// heldNodes lists "key/node" for every lock node under base.
func heldNodes(admin *zk.Conn, base string) ([]string, error) {
	keys, _, err := admin.Children(base)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range keys {
		children, _, err := admin.Children(base + "/" + k)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		key, _ := decodeKey(k)
		for _, m := range order(children) {
			out = append(out, key+"/"+m.name)
		}
	}
	return out, nil
}
