package testserver

import (
	"context"
	"testing"
	"time"
)

// TestRedisSentinelFailover: the set starts settled with Nodes[0] as the
// primary; when the primary is killed the sentinels promote a replica,
// and the old primary, restarted, rejoins as a replica of the new one.
func TestRedisSentinelFailover(t *testing.T) {
	set := RedisSentinel(t, SentinelConfig{Replicas: 2, Sentinels: 3})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	p, err := set.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p != set.Nodes[0] {
		t.Fatalf("primary %s, want %s", p, set.Nodes[0])
	}
	if got := set.URL("prefix=x:"); got != "redis+sentinel://"+set.Sentinels[0].Addr()+","+set.Sentinels[1].Addr()+","+set.Sentinels[2].Addr()+"/0?master=distlock&prefix=x:" {
		t.Errorf("URL = %s", got)
	}
	start := time.Now()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	np, err := set.WaitPrimaryChange(ctx, p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover to %s in %v", np, time.Since(start).Round(time.Millisecond))
	if err := set.Rejoin(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := isRole(ctx, p.Addr(), "slave"); err != nil {
		t.Errorf("old primary after restart: %v", err)
	}
}
