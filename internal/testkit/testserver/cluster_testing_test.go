package testserver

import (
	"context"
	"testing"
	"time"
)

// TestRedisClusterReplicas: a cluster of 3 masters with a replica each
// forms, with every replica in sync with its master.
func TestRedisClusterReplicas(t *testing.T) {
	c := RedisClusterWith(t, ClusterConfig{Masters: 3, Replicas: 1, Persistence: true})
	if len(c.Servers) != 6 {
		t.Fatalf("%d nodes", len(c.Servers))
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	masters, replicas := 0, 0
	for _, s := range c.Servers {
		switch {
		case isRole(ctx, s.Addr(), "master") == nil:
			masters++
		case isRole(ctx, s.Addr(), "slave") == nil:
			replicas++
		}
	}
	if masters != 3 || replicas != 3 {
		t.Errorf("%d masters, %d replicas", masters, replicas)
	}
}
