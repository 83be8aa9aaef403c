package election_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/internal/testkit/testserver"
	_ "github.com/distlock/distlock/memcached"
	_ "github.com/distlock/distlock/memory"
	_ "github.com/distlock/distlock/mysql"
	_ "github.com/distlock/distlock/postgres"
	_ "github.com/distlock/distlock/redis"
	_ "github.com/distlock/distlock/zookeeper"
	"github.com/stretchr/testify/require"
)

// backend names a backend and starts its server (a fresh namespace for
// mem://).
type backend struct {
	name string
	url  func(t *testing.T) string
}

// candidateBackends are in-process, Expiring and session-bound backends.
var candidateBackends = []backend{{"memory", memURL}, {"redis", redisURL}, {"zookeeper", zkURL}}

var memNames atomic.Int64

func memURL(*testing.T) string { return fmt.Sprintf("mem://election%d", memNames.Add(1)) }

func redisURL(t *testing.T) string {
	return "redis://" + testserver.Redis(t, testserver.RedisConfig{}).Addr() + "/0"
}

func zkURL(t *testing.T) string {
	return "zookeeper://" + testserver.ZooKeeper(t, testserver.ZooKeeperConfig{}).Addr() + "/election"
}

func memcachedURL(t *testing.T) string {
	return "memcached://" + testserver.Memcached(t, testserver.MemcachedConfig{}).Addr()
}

func mysqlURL(t *testing.T) string {
	m := testserver.MariaDBServer(t)
	return "mysql://" + m.User + ":" + m.Password + "@" + m.Addr() + "/" + m.DB + "?mode=forupdate"
}

func postgresURL(t *testing.T) string {
	return testserver.PostgresServer(t).DSN() + "&create_table=true&mode=advisory"
}

// open opens a Locker on url, closed when the test ends.
func open(t *testing.T, url string, opts ...distlock.Option) *distlock.Locker {
	t.Helper()
	l, err := distlock.Open(t.Context(), url, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func election(t *testing.T, l *distlock.Locker, key, id string, opts ...distlock.ElectionOption) *distlock.Election {
	t.Helper()
	e, err := distlock.NewElection(l, key, id, opts...)
	require.NoError(t, err)
	return e
}

// settleGoroutines waits, up to 10s, for the goroutine count to fall to at
// most n, and returns the last count seen.
func settleGoroutines(n int) int {
	sqltest.Until(10*time.Second, func() bool { return runtime.NumGoroutine() <= n })
	return runtime.NumGoroutine()
}
