package redis

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// redirectReply is an ASK or MOVED error reply, as go-redis returns it.
type redirectReply string

func (r redirectReply) Error() string { return string(r) }
func (redirectReply) RedisError()     {}

// A Cluster redirect that reached the driver is transient for a Cluster
// client (go-redis ran out of redirects while a slot migrates; a waiter
// with WithRetryUnavailable must go on waiting: TestReshardWhileHeld's
// waiter returned "backend unavailable: ASK 3808 …" in make ci), and not
// for a single-server client pointed at a Cluster node, which no wait
// cures.
func TestClusterRedirectTransientForClusterClientsOnly(t *testing.T) {
	cluster, err := New(goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), WithCloseClient())
	require.NoError(t, err)
	defer cluster.Close()
	single, err := New(goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}), WithCloseClient())
	require.NoError(t, err)
	defer single.Close()
	for _, r := range []redirectReply{"ASK 3808 127.0.0.1:7001", "MOVED 3808 127.0.0.1:7001"} {
		assert.Equal(t, backend.CodeTransient, driverOf(cluster).ErrorCode(r), "Cluster client, %q", r)
		assert.Equal(t, backend.CodeUnavailable, driverOf(single).ErrorCode(r), "single-server client, %q", r)
	}
}
