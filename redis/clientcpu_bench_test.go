package redis

import (
	"context"
	"runtime/metrics"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/distlock/distlock/internal/testkit/testserver"
)

// processCPU is this process's user+system CPU time (getrusage
// RUSAGE_SELF): the client's whole cost, background goroutines included.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// goroutinesCreated is how many goroutines this process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// BenchmarkClientCPU measures the client's CPU per uncontended cycle on one
// local redis-server: cpu-µs/cycle is the process's user+system CPU time
// (getrusage) over the timed loop divided by the cycles, so it counts every
// goroutine of the client (the auto-refresh scheduler's included), not the
// server's. Sub-benchmarks:
//
//   - distlock: TryAcquire + Release with default options (auto-refresh
//     on), through New over a go-redis client;
//   - floor: go-redis alone, SET NX PX then the EVALSHA
//     compare-and-delete, for reference.
func BenchmarkClientCPU(b *testing.B) {
	srv := testserver.Redis(b, testserver.RedisConfig{})
	ctx := context.Background()
	measure := func(b *testing.B, cycle func() error) {
		for range 100 { // warm up: scripts loaded, connection dialled
			require.NoError(b, cycle())
		}
		b.ReportAllocs()
		b.ResetTimer()
		g0 := goroutinesCreated()
		cpu0 := processCPU(b)
		for b.Loop() {
			if err := cycle(); err != nil {
				b.Fatal(err)
			}
		}
		cpu := processCPU(b) - cpu0
		g := goroutinesCreated() - g0
		b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(b.N), "cpu-µs/cycle")
		b.ReportMetric(float64(g)/float64(b.N), "goroutines/cycle")
	}
	b.Run("distlock", func(b *testing.B) {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		defer c.Close()
		l, err := New(c)
		require.NoError(b, err)
		defer l.Close()
		measure(b, func() error {
			lease, err := l.TryAcquire(ctx, "bench/clientcpu")
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		})
	})
	b.Run("floor", func(b *testing.B) {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		defer c.Close()
		del := goredis.NewScript(floorDelSrc)
		require.NoError(b, del.Load(ctx, c).Err())
		measure(b, func() error {
			val := randomValue()
			if err := c.SetNX(ctx, "bench/clientcpu/floor", val, 15001*time.Millisecond).Err(); err != nil {
				return err
			}
			return del.Run(ctx, c, []string{"bench/clientcpu/floor"}, val).Err()
		})
	})
}
