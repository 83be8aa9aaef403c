package etcd

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

func TestMain(m *testing.M) {
	conformance.ServeWorker()
	conformance.ParallelSuites(4) // TestConformance beside three other parallel tests
	code := m.Run()
	shared.stop()
	exclusive.stop()
	os.Exit(code)
}

// The cluster shared by the tests of this package (started on first use,
// stopped by TestMain). With DISTLOCK_ETCD_ENDPOINTS set, that external
// cluster is used instead and fault tests skip.
var shared sharedCluster

type sharedCluster struct {
	mu     sync.Mutex
	c      *testserver.Cluster
	stopFn func()
}

func (s *sharedCluster) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopFn != nil {
		s.stopFn()
	}
}

// dataDir is a new directory for a test cluster's data: on tmpfs where
// there is one, else "" (a temporary directory of testserver's). The tests
// kill and restart members, never the machine, so the disk's fsync buys
// them nothing, and on a loaded disk it was most of the time of a lock
// handoff (a write on a quorum).
func dataDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "distlock-etcd-"); err == nil {
			return d
		}
	}
	return ""
}

// startCluster3 starts a 3-member cluster with its data in dataDir; stop
// stops it and removes the data.
func startCluster3(ctx context.Context) (c *testserver.Cluster, stop func(), err error) {
	dir := dataDir()
	c, err = testserver.StartEtcdCluster(ctx, dir, 3, testserver.EtcdConfig{})
	rm := func() {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}
	if err != nil {
		rm()
		return nil, nil, err
	}
	return c, func() { _ = c.Stop(); rm() }, nil
}

// ownCluster returns a 3-member cluster of the test's own, stopped at its
// end, for tests that fault the cluster while other tests run on the
// shared one; with DISTLOCK_ETCD_ENDPOINTS set, that external cluster.
func ownCluster(t testing.TB) *testserver.Cluster {
	t.Helper()
	testserver.SkipShort(t, "etcd")
	if external() {
		return testserver.EtcdCluster(t, 3, testserver.EtcdConfig{})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, stop, err := startCluster3(ctx)
	if err != nil {
		t.Fatalf("start etcd cluster: %v", err)
	}
	t.Cleanup(stop)
	return c
}

func external() bool { return os.Getenv(testserver.EnvEtcdEndpoints) != "" }

// cluster returns the shared 3-member cluster, on which tests run in
// parallel. Tests that kill, pause or restart members, compact the
// history or flood the cluster use exclusiveCluster instead.
func cluster(t testing.TB) *testserver.Cluster {
	t.Helper()
	return shared.get(t)
}

// ownMember starts a single-member etcd of the test's own, which it may
// stop or configure; with an external cluster the test is skipped, saying
// why it needs its own.
func ownMember(t *testing.T, cfg testserver.EtcdConfig, why string) *testserver.Server {
	t.Helper()
	testserver.SkipShort(t, "etcd")
	if external() {
		t.Skip(why)
	}
	return testserver.Etcd(t, cfg)
}

// exclusive is the second shared cluster, held by one test at a time.
var exclusive = sharedCluster{}

// exclusiveMu is held by the test that has the exclusive cluster.
var exclusiveMu sync.Mutex

// exclusiveCluster returns a 3-member cluster that the test has to itself
// until it ends (the other tests that call it wait): for tests that kill,
// pause or restart members, compact the history or flood the cluster,
// and that run in parallel with those on the shared cluster.
func exclusiveCluster(t testing.TB) *testserver.Cluster {
	t.Helper()
	testserver.SkipShort(t, "etcd")
	exclusiveMu.Lock()
	t.Cleanup(exclusiveMu.Unlock)
	c := exclusive.get(t)
	if c.Controllable() {
		// A test that failed half-way may have left a member down or
		// paused: bring the cluster back first.
		for _, s := range c.Servers {
			_ = s.Resume()
		}
		if err := c.WaitReady(ctxT(t, time.Minute)); err != nil {
			if err := startCluster(ctxT(t, time.Minute), c); err != nil {
				t.Fatalf("the exclusive cluster does not come back: %v", err)
			}
		}
	}
	return c
}

// get returns the cluster, starting it on first use.
func (s *sharedCluster) get(t testing.TB) *testserver.Cluster {
	t.Helper()
	testserver.SkipShort(t, "etcd")
	if external() {
		return testserver.EtcdCluster(t, 3, testserver.EtcdConfig{})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, stop, err := startCluster3(ctx)
		if err != nil {
			t.Fatalf("start etcd cluster: %v", err)
		}
		s.c, s.stopFn = c, stop
	}
	return s.c
}

func needControl(t testing.TB) {
	t.Helper()
	if external() {
		t.Skip("an external etcd cluster cannot be faulted")
	}
}

// adminClient is a plain client for inspecting and breaking things.
func adminClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var prefixSeq atomic.Int64

// uniquePrefix is a key prefix no other test uses.
func uniquePrefix(t testing.TB) string {
	return fmt.Sprintf("/distlock-test/%d-%d", time.Now().UnixNano(), prefixSeq.Add(1))
}

// dialT returns a Locker on endpoints, closed at the end of the test.
func dialT(t testing.TB, endpoints []string, opts ...Option) *distlock.Locker {
	t.Helper()
	l, err := Dial(endpoints, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waiterKeys lists the waiter keys under prefix.
func waiterKeys(ctx context.Context, admin *clientv3.Client, prefix string) ([]string, error) {
	resp, err := admin.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out, nil
}
