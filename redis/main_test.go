package redis

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// quietLogger drops go-redis's log lines (dial failures while a test has
// killed the server on purpose); tests report what matters themselves.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	if os.Getenv("DISTLOCK_REDIS_LOG") == "" {
		goredis.SetLogger(quietLogger{})
	}
	conformance.ServeWorker()      // worker processes of the conformance fault checks
	conformance.ParallelSuites(10) // the four conformance suites and the other parallel tests at once
	code := m.Run()
	stopSharedCluster()
	os.Exit(code)
}

// shared is the package's one Redis Cluster (forming one takes seconds),
// for the tests that neither stop, pause nor restart its nodes; each keeps
// to keys of its own (a prefix, or the conformance suite's unique keys).
var shared struct {
	once    sync.Once
	cluster *testserver.Cluster
	err     error
}

// sharedCluster returns the package's Redis Cluster of three masters,
// formed on first use and stopped when the tests end (or the one listed by
// DISTLOCK_REDIS_CLUSTER_ADDRS).
func sharedCluster(t *testing.T) *testserver.Cluster {
	t.Helper()
	testserver.SkipShort(t, "redis cluster")
	if os.Getenv(testserver.EnvRedisClusterAddrs) != "" {
		return testserver.RedisCluster(t, 3)
	}
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared.cluster, shared.err = testserver.StartRedisCluster(ctx, "", 3)
	})
	require.NoError(t, shared.err, "start the shared redis cluster")
	return shared.cluster
}

func stopSharedCluster() {
	if shared.cluster != nil {
		_ = shared.cluster.Stop()
	}
}
