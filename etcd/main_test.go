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

	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

func TestMain(m *testing.M) {
	conformance.ServeWorker()
	code := m.Run()
	shared.stop()
	os.Exit(code)
}

// The cluster shared by the tests of this package (started on first use,
// stopped by TestMain). With DISTLOCK_ETCD_ENDPOINTS set, that external
// cluster is used instead and fault tests skip.
var shared sharedCluster

type sharedCluster struct {
	mu sync.Mutex
	c  *testserver.Cluster
}

func (s *sharedCluster) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		_ = s.c.Stop()
	}
}

func external() bool { return os.Getenv(testserver.EnvEtcdEndpoints) != "" }

// cluster returns the shared 3-member cluster.
func cluster(t testing.TB) *testserver.Cluster {
	t.Helper()
	testserver.SkipShort(t, "etcd")
	if external() {
		return testserver.EtcdCluster(t, 3, testserver.EtcdConfig{})
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.c == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := testserver.StartEtcdCluster(ctx, "", 3, testserver.EtcdConfig{})
		if err != nil {
			t.Fatalf("start etcd cluster: %v", err)
		}
		shared.c = c
	}
	return shared.c
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
func dialT(t testing.TB, endpoints []string, opts ...Option) *Locker {
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
