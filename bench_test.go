package distlock_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/memory"
	"github.com/stretchr/testify/require"
)

// nopDriver grants every request at once and keeps no state, so a benchmark
// over it measures distlock's shared machinery alone: validation, owner id,
// lease state, scheduling of auto-refresh, release bookkeeping.
type nopDriver struct{ tokens atomic.Uint64 }

type nopLock struct{ token uint64 }

func (d *nopDriver) TryAcquire(context.Context, backend.Request) (backend.Lock, error) {
	return &nopLock{d.tokens.Add(1)}, nil
}
func (d *nopDriver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Expiring: true, Fencing: true}
}
func (d *nopDriver) Close() error                               { return nil }
func (l *nopLock) Token() uint64                                { return l.token }
func (l *nopLock) Refresh(context.Context, time.Duration) error { return nil }
func (l *nopLock) Release(context.Context) error                { return nil }

// benchCycle times TryAcquire + Release. The loops of the benchmarks check
// errors with plain ifs: testify's require marks a helper frame per call
// (runtime.Callers), which costs about as much as the machinery measured.
func benchCycle(b *testing.B, l *distlock.Locker, opts ...distlock.Option) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lease, err := l.TryAcquire(ctx, "bench/key", opts...)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMachinery: the cost distlock adds to every acquire/release cycle,
// over a driver that does nothing.
func BenchmarkMachinery(b *testing.B) {
	b.Run("auto-refresh", func(b *testing.B) { benchCycle(b, distlock.New(&nopDriver{}, "nop")) })
	b.Run("no-refresh", func(b *testing.B) {
		benchCycle(b, distlock.New(&nopDriver{}, "nop"), distlock.WithAutoRefresh(false))
	})
	b.Run("owner", func(b *testing.B) {
		benchCycle(b, distlock.New(&nopDriver{}, "nop"), distlock.WithOwner("me"))
	})
	// An Observer that does nothing: what building and delivering the
	// events costs (the paths above have none: one nil check).
	b.Run("observer", func(b *testing.B) {
		benchCycle(b, distlock.New(&nopDriver{}, "nop"), distlock.WithObserver(distlock.NopObserver{}))
	})
}

// BenchmarkMemory: uncontended cycles on the in-process backend.
func BenchmarkMemory(b *testing.B) {
	b.Run("try-acquire", func(b *testing.B) { benchCycle(b, memory.MustNew(memory.NewNamespace())) })
	b.Run("acquire", func(b *testing.B) {
		l := memory.MustNew(memory.NewNamespace())
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			lease, err := l.Acquire(ctx, "bench/key")
			if err != nil {
				b.Fatal(err)
			}
			_ = lease.Release(ctx)
		}
	})
}

// BenchmarkHeldLeases holds n auto-refreshed leases at once and reports the
// heap per lease (distlock's state plus the memory backend's) and the
// goroutines they need. Refreshes run (TTL 3s: one round per second).
func BenchmarkHeldLeases(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			ctx := context.Background()
			var perLease, goroutines float64
			for b.Loop() {
				l := memory.MustNew(memory.NewNamespace())
				keys := make([]string, n)
				for i := range keys {
					keys[i] = "held/" + strconv.Itoa(i)
				}
				leases := make([]*distlock.Lease, n)
				g0 := runtime.NumGoroutine()
				m0 := heap()
				for i, k := range keys {
					lease, err := l.TryAcquire(ctx, k, distlock.WithTTL(3*time.Second))
					require.NoError(b, err)
					leases[i] = lease
				}
				time.Sleep(1500 * time.Millisecond) // at least one refresh round
				m1 := heap()
				perLease = float64(m1-m0) / float64(n)
				goroutines = float64(runtime.NumGoroutine() - g0)
				for _, lease := range leases {
					require.NoError(b, lease.Err(), "lease lost")
					_ = lease.Release(ctx)
				}
				_ = l.Close()
			}
			b.ReportMetric(perLease, "B/lease")
			b.ReportMetric(goroutines, "goroutines")
		})
	}
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func (*nopDriver) Inspect(context.Context, string) (backend.LockInfo, error) {
	return backend.LockInfo{}, errors.ErrUnsupported
}

func (*nopDriver) ForceRelease(context.Context, string, backend.Holder) (backend.LockInfo, error) {
	return backend.LockInfo{}, errors.ErrUnsupported
}
