package testserver

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// RedisClusterWith starts a Redis Cluster as cfg says (see
// StartRedisClusterConfig) in t.TempDir() and stops it on cleanup.
func RedisClusterWith(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	SkipShort(t, "redis cluster")
	ctx, cancel := startCtx(t)
	defer cancel()
	c, err := StartRedisClusterConfig(ctx, t.TempDir(), cfg)
	if err != nil {
		fatalStart(t, "redis cluster", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// WaitClusterReplicas waits until every master of c has n replicas online
// and in sync, and every node's CLUSTER SLOTS, a replica's too, lists them:
// after a failover and the old master's return, for example.
func WaitClusterReplicas(ctx context.Context, c *Cluster, n int) error {
	if n == 0 {
		return nil
	}
	for {
		err := clusterReplicasReady(ctx, c, n)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: redis cluster replicas not ready: %w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func clusterReplicasReady(ctx context.Context, c *Cluster, n int) error {
	masters := 0
	for _, s := range c.Servers {
		if isRole(ctx, s.Addr(), "master") == nil {
			masters++
			if err := replicasOnline(ctx, s.Addr(), n, true); err != nil {
				return err
			}
		}
		v, err := redisDo(ctx, s.Addr(), "CLUSTER", "SLOTS")
		if err != nil {
			return err
		}
		ranges, _ := v.([]any)
		for _, r := range ranges {
			// [start, end, master, replica...]
			if nodes := len(r.([]any)) - 2; nodes != 1+n {
				return fmt.Errorf("redis %s: CLUSTER SLOTS lists %d nodes for a range, want %d", s.Addr(), nodes, 1+n)
			}
		}
	}
	if masters*(1+n) != len(c.Servers) {
		return fmt.Errorf("redis cluster: %d masters of %d nodes, want %d", masters, len(c.Servers), len(c.Servers)/(1+n))
	}
	return nil
}
