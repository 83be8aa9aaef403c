package jobs_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// The package's servers: one of each kind per run, started on first use
// and stopped by TestMain, instead of one per subtest (a MariaDB or a
// PostgreSQL start is seconds, and the package made sixteen of them). Every
// URL a test gets names a namespace of its own (a key prefix, a ZooKeeper
// or etcd path, a SQL table, which is also the namespace of PostgreSQL's
// advisory lock ids), so no test sees another's locks or minimum holds.

func TestMain(m *testing.M) {
	code := m.Run()
	stopShared()
	os.Exit(code)
}

var (
	sharedMu    sync.Mutex
	sharedKinds = map[string]*sharedKind{}
	namespaces  atomic.Int64
)

type sharedKind struct {
	once sync.Once
	srv  any
	err  error
	stop func()
}

// shared returns the package's server of kind what, started by start in a
// directory of its own on first use.
func shared[T any](t *testing.T, what string, start func(ctx context.Context, dir string) (T, error), stop func(T) error) T {
	t.Helper()
	testserver.SkipShort(t, what)
	sharedMu.Lock()
	k := sharedKinds[what]
	if k == nil {
		k = &sharedKind{}
		sharedKinds[what] = k
	}
	sharedMu.Unlock()
	k.once.Do(func() {
		dir, err := os.MkdirTemp("", "distlock-jobs-"+what+"-")
		if err != nil {
			k.err = err
			return
		}
		// Not t's context: the server outlives the test that starts it.
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		s, err := start(ctx, dir)
		if err != nil {
			k.err = err
			_ = os.RemoveAll(dir)
			return
		}
		k.srv, k.stop = s, func() { _ = stop(s); _ = os.RemoveAll(dir) }
	})
	require.NoError(t, k.err, "start %s", what)
	return k.srv.(T)
}

// startTimeout bounds a shared server's start (slow JVM and database starts
// on a loaded machine).
const startTimeout = 2 * time.Minute

func stopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	for _, k := range sharedKinds {
		if k.stop != nil {
			k.stop()
		}
	}
}

// namespace returns a name no other URL of this run has.
func namespace() string { return fmt.Sprintf("jobs%d", namespaces.Add(1)) }

func redisURL(t *testing.T) string {
	var addr string
	if os.Getenv(testserver.EnvRedisAddr) != "" {
		addr = testserver.Redis(t, testserver.RedisConfig{}).Addr()
	} else {
		addr = shared(t, "redis", func(ctx context.Context, dir string) (*testserver.Server, error) {
			return testserver.StartRedis(ctx, dir, testserver.RedisConfig{})
		}, (*testserver.Server).Stop).Addr()
	}
	return "redis://" + addr + "/0?prefix=" + namespace() + ":"
}

func memcachedURL(t *testing.T) string {
	var addr string
	if os.Getenv(testserver.EnvMemcachedAddr) != "" {
		addr = testserver.Memcached(t, testserver.MemcachedConfig{}).Addr()
	} else {
		addr = shared(t, "memcached", func(ctx context.Context, dir string) (*testserver.Server, error) {
			return testserver.StartMemcached(ctx, dir, testserver.MemcachedConfig{})
		}, (*testserver.Server).Stop).Addr()
	}
	return "memcached://" + addr + "?prefix=" + namespace() + ":"
}

func zookeeperURL(t *testing.T) string {
	var addr string
	if os.Getenv(testserver.EnvZooKeeperAddrs) != "" {
		addr = testserver.ZooKeeper(t, testserver.ZooKeeperConfig{}).Addr()
	} else {
		addr = shared(t, "zookeeper", func(ctx context.Context, dir string) (*testserver.Server, error) {
			return testserver.StartZooKeeper(ctx, dir, testserver.ZooKeeperConfig{})
		}, (*testserver.Server).Stop).Addr()
	}
	return "zookeeper://" + addr + "/" + namespace()
}

func etcdURL(t *testing.T) string {
	addr := shared(t, "etcd", func(ctx context.Context, dir string) (*testserver.Server, error) {
		return testserver.StartEtcd(ctx, dir, testserver.EtcdConfig{})
	}, (*testserver.Server).Stop).Addr()
	return "etcd://" + addr + "/" + namespace()
}

func mysqlURL(t *testing.T, mode string) string {
	var m *testserver.MariaDB
	if os.Getenv(testserver.EnvMySQLDSN) != "" {
		m = testserver.MariaDBServer(t)
	} else {
		m = shared(t, "mariadb", testserver.StartMariaDB, func(m *testserver.MariaDB) error { return m.Stop() })
	}
	return "mysql://" + m.User + ":" + m.Password + "@" + m.Addr() + "/" + m.DB + "?mode=" + mode + "&table=" + namespace()
}

func postgresURL(t *testing.T, mode string) string {
	var p *testserver.Postgres
	if os.Getenv(testserver.EnvPostgresDSN) != "" {
		p = testserver.PostgresServer(t)
	} else {
		p = shared(t, "postgres", testserver.StartPostgres, func(p *testserver.Postgres) error { return p.Stop() })
	}
	// A crowd of a hundred cold SCRAM logins at once (TryDo's crowd test,
	// advisory mode pins a connection per try) outlasts the 5 s default
	// dial timeout under -race on a loaded machine: a tolerance, scaled.
	connect := int(slack.D(30 * time.Second).Seconds())
	return fmt.Sprintf("%s&create_table=true&mode=%s&table=%s&connect_timeout=%d", p.DSN(), mode, namespace(), connect)
}
