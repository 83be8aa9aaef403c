package redlock

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// quietLogger drops go-redis's log lines (dial failures while a test has
// killed nodes on purpose); tests report what matters themselves.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	if os.Getenv("DISTLOCK_REDIS_LOG") == "" {
		goredis.SetLogger(quietLogger{})
	}
	conformance.ServeWorker()     // worker processes of the conformance fault checks
	conformance.ParallelSuites(4) // TestConformance and the tests that wait longest
	os.Exit(m.Run())
}

// cluster is N independent redis-servers and an admin client for each.
type cluster struct {
	srvs   []*testserver.Server
	admins []*goredis.Client
}

func startCluster(t testing.TB, n int) *cluster {
	t.Helper()
	c := &cluster{srvs: testserver.RedisN(t, n)}
	for _, s := range c.srvs {
		a := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = a.Close() })
		c.admins = append(c.admins, a)
	}
	return c
}

func (c *cluster) addrs() []string {
	out := make([]string, len(c.srvs))
	for i, s := range c.srvs {
		out[i] = s.Addr()
	}
	return out
}

func (c *cluster) controllable(t testing.TB) {
	t.Helper()
	for _, s := range c.srvs {
		if !s.Controllable() {
			t.Skip("external Redis servers: cannot inject faults")
		}
	}
}

// url is a redlock URL over addrs with the given query.
func redlockURL(addrs []string, query string) string {
	u := "redlock://" + strings.Join(addrs, ",") + "/0"
	if query != "" {
		u += "?" + query
	}
	return u
}

// holders returns the nodes on which the lock named key exists.
func (c *cluster) holders(t testing.TB, prefix, key string) []int {
	t.Helper()
	name := redislua.KeysFor(prefix, key).Lock
	var out []int
	for i, a := range c.admins {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		n, err := a.Exists(ctx, name).Result()
		cancel()
		if err == nil && n == 1 {
			out = append(out, i)
		}
	}
	return out
}

// owners returns, per node, the owner of the lock named key ("" if none or
// unreachable).
func (c *cluster) owners(t testing.TB, prefix, key string) []string {
	t.Helper()
	name := redislua.KeysFor(prefix, key).Lock
	out := make([]string, len(c.admins))
	for i, a := range c.admins {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		out[i], _ = a.HGet(ctx, name, "o").Result()
		cancel()
	}
	return out
}

// kill and restart nodes by index.
func (c *cluster) kill(t testing.TB, idx ...int) {
	t.Helper()
	for _, i := range idx {
		if err := c.srvs[i].Kill(); err != nil {
			t.Fatalf("kill node %d: %v", i, err)
		}
	}
}

func (c *cluster) restart(t testing.TB, idx ...int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(idx))
	for j, i := range idx {
		wg.Go(func() { errs[j] = c.srvs[i].Restart(ctx) })
	}
	wg.Wait()
	for j, err := range errs {
		if err != nil {
			t.Fatalf("restart node %d: %v", idx[j], err)
		}
	}
}

// testLocker is a Locker over its own clients, with the driver at hand.
type testLocker = distlock.Locker

// newTestLocker makes a Locker over new clients of addrs, configured as the
// URL opener does (ContextTimeoutEnabled) plus opts.
func newTestLocker(t testing.TB, addrs []string, opts ...Option) *testLocker {
	t.Helper()
	clients := make([]goredis.UniversalClient, len(addrs))
	for i, a := range addrs {
		clients[i] = goredis.NewClient(&goredis.Options{Addr: a, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: 1})
	}
	l, err := New(clients, append([]Option{WithCloseClients()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func tctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 20ms until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// closedPorts returns n loopback addresses on which nothing listens.
func closedPorts(t testing.TB, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ln.Addr().String())
		_ = ln.Close()
	}
	return out
}

// scanLocks returns the lock keys under prefix on every node, as
// "name@addr".
func (c *cluster) scanLocks(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	for i, a := range c.admins {
		iter := a.Scan(ctx, 0, prefix+"{*", 100).Iterator()
		for iter.Next(ctx) {
			out = append(out, fmt.Sprintf("%s@%s", iter.Val(), c.srvs[i].Addr()))
		}
		if err := iter.Err(); err != nil {
			return nil, fmt.Errorf("node %s: %w", c.srvs[i].Addr(), err)
		}
	}
	return out, nil
}

// roundTrips counts the commands (and pipelines) a client has started and
// finished, retries included.
type roundTrips struct{ started, finished atomic.Int64 }

func (h *roundTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *roundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.started.Add(1)
		defer h.finished.Add(1)
		return next(ctx, cmd)
	}
}
func (h *roundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.started.Add(1)
		defer h.finished.Add(1)
		return next(ctx, cmds)
	}
}

// trackRoundTrips counts the round trips of l to the given nodes.
func trackRoundTrips(l *testLocker, nodes ...int) []*roundTrips {
	out := make([]*roundTrips, len(nodes))
	for j, i := range nodes {
		out[j] = &roundTrips{}
		driverOf(l).nodes[i].client.(*goredis.Client).AddHook(out[j])
	}
	return out
}

// roundTripsOver waits until each of hs has had a round trip and none is
// under way: an operation sent to those nodes has had its answer.
func roundTripsOver(t testing.TB, what string, hs []*roundTrips) {
	t.Helper()
	eventually(t, 10*time.Second, what, func() bool {
		for _, h := range hs {
			if s := h.started.Load(); s == 0 || h.finished.Load() != s {
				return false
			}
		}
		return true
	})
}

// quiet waits until counter has counted something and then not changed
// for window: the waiters it counts the attempts of are asleep.
func quiet(t testing.TB, d time.Duration, what string, counter *acquireCounter, window time.Duration) {
	t.Helper()
	prev := int64(-1)
	eventually(t, d, what, func() bool {
		time.Sleep(window)
		cur := counter.n.Load()
		q := cur > 0 && cur == prev
		prev = cur
		return q
	})
}

// warm opens l's connections to every node that answers and loads its
// scripts, with one acquisition and release of a key of its own, tried
// again until it succeeds (at most slack.D(30s)): the first round trips
// of a new client on a loaded machine can outlast a short per-node
// timeout, which is not what the caller's test is about.
func warm(t testing.TB, l *testLocker) {
	t.Helper()
	ctx := tctx(t, slack.D(30*time.Second))
	for {
		lease, err := l.TryAcquire(ctx, "warm")
		if err == nil {
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("warm-up release: %v", err)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("warm-up acquisition: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
