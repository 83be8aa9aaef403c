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
//     compare-and-delete, for reference;
//   - paired: blocks of pairBlock cycles of each, alternating (which goes
//     first alternates too), one op being one pair of blocks: the medians
//     of each one's CPU per cycle and of the pairs' differences
//     (distlock−floor), which on a loaded machine move far less between
//     runs than the separate figures (the client's CPU grows with the
//     server's latency too: a client waiting longer spins and polls
//     more).
func BenchmarkClientCPU(b *testing.B) {
	srv := testserver.Redis(b, testserver.RedisConfig{})
	ctx := context.Background()
	warm := func(b *testing.B, cycle func() error) {
		for range 100 { // scripts loaded, connection dialled
			require.NoError(b, cycle())
		}
	}
	measure := func(b *testing.B, cycle func() error) {
		warm(b, cycle)
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
	distlockCycle := func(b *testing.B, key string) func() error {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		b.Cleanup(func() { _ = c.Close() })
		l, err := New(c)
		require.NoError(b, err)
		b.Cleanup(func() { _ = l.Close() })
		return func() error {
			lease, err := l.TryAcquire(ctx, key)
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}
	}
	floorCycle := func(b *testing.B, key string) func() error {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		b.Cleanup(func() { _ = c.Close() })
		del := goredis.NewScript(floorDelSrc)
		require.NoError(b, del.Load(ctx, c).Err())
		return func() error {
			val := randomValue()
			if err := c.SetNX(ctx, key, val, 15001*time.Millisecond).Err(); err != nil {
				return err
			}
			return del.Run(ctx, c, []string{key}, val).Err()
		}
	}
	b.Run("distlock", func(b *testing.B) { measure(b, distlockCycle(b, "bench/clientcpu")) })
	b.Run("floor", func(b *testing.B) { measure(b, floorCycle(b, "bench/clientcpu/floor")) })
	b.Run("paired", func(b *testing.B) {
		cycles := [2]func() error{floorCycle(b, "bench/clientcpu/paired-floor"), distlockCycle(b, "bench/clientcpu/paired")}
		for _, c := range cycles {
			warm(b, c)
		}
		var per [2][]float64 // µs per cycle of each block: floor, distlock
		var diff []float64
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			var us [2]float64
			for j := range 2 {
				k := (i + j) % 2
				cpu0 := processCPU(b)
				for range pairBlock {
					if err := cycles[k](); err != nil {
						b.Fatal(err)
					}
				}
				us[k] = float64(processCPU(b)-cpu0) / float64(time.Microsecond) / pairBlock
			}
			per[0], per[1] = append(per[0], us[0]), append(per[1], us[1])
			diff = append(diff, us[1]-us[0])
		}
		b.StopTimer()
		b.ReportMetric(median(per[0]), "floor-cpu-µs/cycle")
		b.ReportMetric(median(per[1]), "distlock-cpu-µs/cycle")
		b.ReportMetric(median(diff), "diff-cpu-µs/cycle")
	})
}

// pairBlock is the cycles of one block of BenchmarkClientCPU/paired.
const pairBlock = 200
