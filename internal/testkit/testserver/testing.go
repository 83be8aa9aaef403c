package testserver

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"
)

// Environment variables that point the test wrappers at external servers
// (see the package documentation).
const (
	// EnvRedisAddr is one Redis "host:port", used by Redis.
	EnvRedisAddr = "DISTLOCK_REDIS_ADDR"
	// EnvRedlockAddrs lists independent Redis masters, comma-separated,
	// used by RedisN.
	EnvRedlockAddrs = "DISTLOCK_REDLOCK_ADDRS"
	// EnvRedisClusterAddrs lists Redis Cluster nodes, comma-separated, used
	// by RedisCluster.
	EnvRedisClusterAddrs = "DISTLOCK_REDIS_CLUSTER_ADDRS"
	// EnvMemcachedAddr is one memcached "host:port", used by Memcached.
	EnvMemcachedAddr = "DISTLOCK_MEMCACHED_ADDR"
	// EnvZooKeeperAddrs lists ZooKeeper servers, comma-separated, used by
	// ZooKeeper (first address) and ZooKeeperEnsemble (all).
	EnvZooKeeperAddrs = "DISTLOCK_ZOOKEEPER_ADDRS"
	// EnvMySQLDSN is a go-sql-driver DSN, used by MariaDBServer.
	EnvMySQLDSN = "DISTLOCK_MYSQL_DSN"
	// EnvPostgresDSN is a postgres:// URL, used by PostgresServer.
	EnvPostgresDSN = "DISTLOCK_POSTGRES_DSN"
)

// startTimeout bounds a test wrapper's start, including slow JVM starts on a
// loaded machine.
const startTimeout = 2 * time.Minute

// externalTimeout bounds the reachability check of external servers.
const externalTimeout = 10 * time.Second

// SkipShort skips t under `go test -short`: the test needs a real server
// (what names it), and -short runs only the tests that need none. Every
// wrapper below calls it; tests that call a Start function themselves call
// it first.
func SkipShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs a %s server: skipped with -short", what)
	}
}

func startCtx(t testing.TB) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), startTimeout)
}

// external returns a non-controllable Server for addr after checking that
// it answers.
func external(t testing.TB, kind, env, addr string, probe func(context.Context, string) error) *Server {
	t.Helper()
	s := externalServer(kind, addr, probe)
	ctx, cancel := context.WithTimeout(t.Context(), externalTimeout)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatalf("testserver: external %s from %s=%s: %v", kind, env, addr, err)
	}
	return s
}

func externalCluster(t testing.TB, kind, env string, addrs []string, probe func(context.Context, string) error) *Cluster {
	t.Helper()
	c := &Cluster{}
	for _, a := range addrs {
		c.Servers = append(c.Servers, external(t, kind, env, a, probe))
	}
	return c
}

func fatalStart(t testing.TB, what string, err error) {
	t.Helper()
	if errors.Is(err, ErrMissingBinary) {
		t.Fatalf("testserver: cannot start %s: %v", what, err)
	}
	t.Fatalf("testserver: start %s: %v", what, err)
}

// Redis starts a Redis server for the test (see StartRedis) in t.TempDir()
// and stops it on cleanup. With DISTLOCK_REDIS_ADDR set it returns a
// non-controllable Server for that address instead and ignores cfg.
func Redis(t testing.TB, cfg RedisConfig) *Server {
	t.Helper()
	SkipShort(t, "redis")
	if addr := os.Getenv(EnvRedisAddr); addr != "" {
		return external(t, "redis", EnvRedisAddr, addr, redisPing)
	}
	ctx, cancel := startCtx(t)
	defer cancel()
	s, err := StartRedis(ctx, t.TempDir(), cfg)
	if err != nil {
		fatalStart(t, "redis-server", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// RedisN starts n independent Redis masters (for Redlock) in parallel, each
// without persistence, and stops them on cleanup. With
// DISTLOCK_REDLOCK_ADDRS set it returns non-controllable Servers for the
// first n addresses listed there (the test fails if fewer are listed).
func RedisN(t testing.TB, n int) []*Server {
	t.Helper()
	SkipShort(t, "redis")
	if v := os.Getenv(EnvRedlockAddrs); v != "" {
		addrs := splitAddrs(v)
		if len(addrs) < n {
			t.Fatalf("testserver: %s lists %d addresses, the test needs %d", EnvRedlockAddrs, len(addrs), n)
		}
		return externalCluster(t, "redis", EnvRedlockAddrs, addrs[:n], redisPing).Servers
	}
	ctx, cancel := startCtx(t)
	defer cancel()
	out := make([]*Server, n)
	errs := make([]error, n)
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i], errs[i] = StartRedis(ctx, dirs[i], RedisConfig{}) })
	}
	wg.Wait()
	for _, s := range out {
		if s != nil {
			t.Cleanup(func() { _ = s.Stop() })
		}
	}
	if err := errors.Join(errs...); err != nil {
		fatalStart(t, "redis-server", err)
	}
	return out
}

// RedisCluster starts a Redis Cluster of masters nodes without replicas (see
// StartRedisCluster) and stops it on cleanup. With
// DISTLOCK_REDIS_CLUSTER_ADDRS set it returns non-controllable Servers for
// the listed nodes instead.
func RedisCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	SkipShort(t, "redis cluster")
	if v := os.Getenv(EnvRedisClusterAddrs); v != "" {
		return externalCluster(t, "redis", EnvRedisClusterAddrs, splitAddrs(v), redisPing)
	}
	ctx, cancel := startCtx(t)
	defer cancel()
	c, err := StartRedisCluster(ctx, t.TempDir(), masters)
	if err != nil {
		fatalStart(t, "redis cluster", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// Memcached starts memcached for the test (see StartMemcached) and stops it
// on cleanup. With DISTLOCK_MEMCACHED_ADDR set it returns a non-controllable
// Server for that address instead and ignores cfg.
func Memcached(t testing.TB, cfg MemcachedConfig) *Server {
	t.Helper()
	SkipShort(t, "memcached")
	if addr := os.Getenv(EnvMemcachedAddr); addr != "" {
		return external(t, "memcached", EnvMemcachedAddr, addr, memcachedVersion)
	}
	ctx, cancel := startCtx(t)
	defer cancel()
	s, err := StartMemcached(ctx, t.TempDir(), cfg)
	if err != nil {
		fatalStart(t, "memcached", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// ZooKeeper starts a standalone ZooKeeper server for the test (see
// StartZooKeeper) and stops it on cleanup. With DISTLOCK_ZOOKEEPER_ADDRS
// set it returns a non-controllable Server for the first address listed
// there instead and ignores cfg.
func ZooKeeper(t testing.TB, cfg ZooKeeperConfig) *Server {
	t.Helper()
	SkipShort(t, "ZooKeeper")
	if v := os.Getenv(EnvZooKeeperAddrs); v != "" {
		addrs := splitAddrs(v)
		if len(addrs) == 0 {
			t.Fatalf("testserver: %s is empty", EnvZooKeeperAddrs)
		}
		return external(t, "zookeeper", EnvZooKeeperAddrs, addrs[0], zkServing)
	}
	ctx, cancel := startCtx(t)
	defer cancel()
	s, err := StartZooKeeper(ctx, t.TempDir(), cfg)
	if err != nil {
		fatalStart(t, "zookeeper", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// ZooKeeperEnsemble starts an n-node ZooKeeper ensemble for the test (see
// StartZooKeeperEnsemble) and stops it on cleanup. With
// DISTLOCK_ZOOKEEPER_ADDRS set it returns non-controllable Servers for all
// the listed addresses instead (whatever n is) and ignores cfg.
func ZooKeeperEnsemble(t testing.TB, n int, cfg ZooKeeperConfig) *Cluster {
	t.Helper()
	SkipShort(t, "ZooKeeper")
	if v := os.Getenv(EnvZooKeeperAddrs); v != "" {
		addrs := splitAddrs(v)
		if len(addrs) != n {
			t.Logf("testserver: %s lists %d servers, the test asked for %d: using the list", EnvZooKeeperAddrs, len(addrs), n)
		}
		return externalCluster(t, "zookeeper", EnvZooKeeperAddrs, addrs, zkServing)
	}
	ctx, cancel := startCtx(t)
	defer cancel()
	c, err := StartZooKeeperEnsemble(ctx, t.TempDir(), n, cfg)
	if err != nil {
		fatalStart(t, "zookeeper ensemble", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// MariaDBServer starts a MariaDB server for the test (see StartMariaDB) and
// stops it on cleanup. With DISTLOCK_MYSQL_DSN set it returns a
// non-controllable MariaDB for that DSN instead; DSN() then returns the
// variable unchanged.
func MariaDBServer(t testing.TB) *MariaDB {
	t.Helper()
	SkipShort(t, "MariaDB")
	if dsn := os.Getenv(EnvMySQLDSN); dsn != "" {
		user, pass, addr, db, err := parseMySQLDSN(dsn)
		if err != nil {
			t.Fatalf("testserver: %s: %v", EnvMySQLDSN, err)
		}
		s := external(t, "mariadb", EnvMySQLDSN, addr, mysqlGreets)
		return &MariaDB{Server: s, User: user, Password: pass, DB: db, dsn: dsn}
	}
	ctx, cancel := startCtx(t)
	defer cancel()
	m, err := StartMariaDB(ctx, t.TempDir())
	if err != nil {
		fatalStart(t, "mariadb", err)
	}
	t.Cleanup(func() { _ = m.Stop() })
	return m
}

// zkServing accepts any serving mode of an external ZooKeeper server.
func zkServing(ctx context.Context, addr string) error {
	_, err := zkMode(ctx, addr)
	return err
}

// PostgresServer starts a PostgreSQL server for the test (see
// StartPostgres) and stops it on cleanup. With DISTLOCK_POSTGRES_DSN set it
// returns a non-controllable Postgres for that URL instead; DSN() then
// returns the variable unchanged.
func PostgresServer(t testing.TB) *Postgres {
	t.Helper()
	SkipShort(t, "PostgreSQL")
	if dsn := os.Getenv(EnvPostgresDSN); dsn != "" {
		user, pass, addr, db, err := parsePostgresDSN(dsn)
		if err != nil {
			t.Fatalf("testserver: %s: %v", EnvPostgresDSN, err)
		}
		s := external(t, "postgres", EnvPostgresDSN, addr, func(ctx context.Context, addr string) error {
			return pgAccepts(ctx, addr, user, db)
		})
		return &Postgres{Server: s, User: user, Password: pass, DB: db, dsn: dsn}
	}
	ctx, cancel := startCtx(t)
	defer cancel()
	p, err := StartPostgres(ctx, t.TempDir())
	if err != nil {
		fatalStart(t, "postgres", err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p
}
