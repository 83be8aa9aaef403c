package redis

import (
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/benchkit"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// BenchmarkWaitReplicas is the cost of wait_replicas=1 on an uncontended
// try-acquire+release cycle, against a primary with one replica on
// loopback: plain, and with every acquisition confirmed by WAIT.
func BenchmarkWaitReplicas(b *testing.B) {
	srv := testserver.Redis(b, testserver.RedisConfig{})
	_, port, _ := strings.Cut(srv.Addr(), ":")
	testserver.Redis(b, testserver.RedisConfig{ExtraArgs: []string{"--replicaof", "127.0.0.1", port}})
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(admin.Info(b.Context(), "replication").Val(), "state=online") {
		if time.Now().After(deadline) {
			b.Fatal("replica not online")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, q := range []string{"", "?wait_replicas=1&wait_timeout=1s"} {
		name := "plain"
		if q != "" {
			name = "wait_replicas=1"
		}
		b.Run(name, func(b *testing.B) {
			l := benchkit.Open(b, "redis://"+srv.Addr()+"/0"+q)
			benchkit.Cycle(b, l, "bench/wait", true, distlock.WithAutoRefresh(false))
		})
	}
}
