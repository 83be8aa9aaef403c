package redis

import (
	"testing"

	"github.com/distlock/distlock/internal/testkit/benchkit"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// BenchmarkSemaphore: permits and AcquireAll against one local
// redis-server, beside the lock (benchkit.Semaphores).
func BenchmarkSemaphore(b *testing.B) {
	srv := testserver.Redis(b, testserver.RedisConfig{})
	benchkit.Semaphores(b, benchkit.Open(b, "redis://"+srv.Addr()+"/0"))
}
