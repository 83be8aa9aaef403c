package testserver

import "testing"

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
