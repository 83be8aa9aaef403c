package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/redisscript"
	"github.com/distlock/distlock/internal/testserver"
)

// confTTL is the shortest TTL the expiry checks use: Redis honours
// milliseconds, the margin is for a loaded 2-core machine under -race.
const confTTL = 400 * time.Millisecond

// expireFault deletes the lock key directly, bypassing the owner check, as
// an expiry while the holder is paused would.
func expireFault(admin goredis.UniversalClient, prefix string) func(ctx context.Context, key string) error {
	return func(ctx context.Context, key string) error {
		n, err := admin.Del(ctx, redisscript.KeysFor(prefix, key).Lock).Result()
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("lock key of %q not present", key)
		}
		return nil
	}
}

// TestConformance runs the whole suite against one redis-server, opening
// every Locker by URL (each with its own client and connections).
func TestConformance(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	const prefix = "conf:"
	conformance.Run(t, conformance.Harness{
		Name: "redis",
		NewLocker: func(ctx context.Context) (distlock.Locker, error) {
			return distlock.Open(ctx, "redis://"+srv.Addr()+"/0?prefix="+prefix)
		},
		TTL:    confTTL,
		Faults: conformance.Faults{Expire: expireFault(admin, prefix)},
	})
}

// TestConformanceCluster runs the whole suite against a Redis Cluster of
// three masters through goredis.ClusterClient: every lock's keys must share
// a slot, and wake-ups must cross nodes.
func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster: not in -short")
	}
	cluster := testserver.RedisCluster(t, 3)
	addrs := cluster.Addrs()
	admin := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = admin.Close() })
	conformance.Run(t, conformance.Harness{
		Name: "redis-cluster",
		NewLocker: func(ctx context.Context) (distlock.Locker, error) {
			c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
			if err := c.Ping(ctx).Err(); err != nil {
				_ = c.Close()
				return nil, err
			}
			return New(c, WithCloseClient()), nil
		},
		TTL:    confTTL,
		Faults: conformance.Faults{Expire: expireFault(admin, redisscript.DefaultPrefix)},
	})
}
