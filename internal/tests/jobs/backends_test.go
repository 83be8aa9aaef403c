package jobs_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	_ "github.com/distlock/distlock/etcd"
	"github.com/distlock/distlock/internal/testkit/testserver"
	_ "github.com/distlock/distlock/mysql"
	_ "github.com/distlock/distlock/postgres"
	_ "github.com/distlock/distlock/zookeeper"
)

// memNames makes each test's mem:// namespace its own (a minimum hold left
// in one must not reach the next).
var memNames atomic.Int64

// expiringBackends are the Expiring backends that inspect and force:
// in-process, one with exact expiries, one with whole-second ones.
var expiringBackends = everyBackend[:3]

// everyBackend is one URL maker per backend and mode, each starting its
// own server.
var everyBackend = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"memory", func(t *testing.T) string { return fmt.Sprintf("mem://jobs%d", memNames.Add(1)) }},
	{"redis", func(t *testing.T) string {
		return "redis://" + testserver.Redis(t, testserver.RedisConfig{}).Addr() + "/0"
	}},
	{"memcached", func(t *testing.T) string {
		return "memcached://" + testserver.Memcached(t, testserver.MemcachedConfig{}).Addr()
	}},
	{"zookeeper", func(t *testing.T) string {
		return "zookeeper://" + testserver.ZooKeeper(t, testserver.ZooKeeperConfig{}).Addr() + "/jobs"
	}},
	{"etcd", func(t *testing.T) string {
		return "etcd://" + testserver.Etcd(t, testserver.EtcdConfig{}).Addr() + "/jobs"
	}},
	{"mysql-row", func(t *testing.T) string { return mysqlURL(t, "row") }},
	{"mysql-forupdate", func(t *testing.T) string { return mysqlURL(t, "forupdate") }},
	{"postgres-row", func(t *testing.T) string { return postgresURL(t, "row") }},
	{"postgres-advisory", func(t *testing.T) string { return postgresURL(t, "advisory") }},
}

func mysqlURL(t *testing.T, mode string) string {
	m := testserver.MariaDBServer(t)
	return "mysql://" + m.User + ":" + m.Password + "@" + m.Addr() + "/" + m.DB + "?mode=" + mode
}

func postgresURL(t *testing.T, mode string) string {
	return testserver.PostgresServer(t).DSN() + "&create_table=true&mode=" + mode
}
