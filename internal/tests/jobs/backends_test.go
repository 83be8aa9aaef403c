package jobs_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	_ "github.com/distlock/distlock/etcd"
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
// namespace of its own on the package's server of its kind (servers_test.go).
var everyBackend = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"memory", func(t *testing.T) string { return fmt.Sprintf("mem://jobs%d", memNames.Add(1)) }},
	{"redis", redisURL},
	{"memcached", memcachedURL},
	{"zookeeper", zookeeperURL},
	{"etcd", etcdURL},
	{"mysql-row", func(t *testing.T) string { return mysqlURL(t, "row") }},
	{"mysql-forupdate", func(t *testing.T) string { return mysqlURL(t, "forupdate") }},
	{"postgres-row", func(t *testing.T) string { return postgresURL(t, "row") }},
	{"postgres-advisory", func(t *testing.T) string { return postgresURL(t, "advisory") }},
}
