package benchkit

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// Open opens url with opts for a benchmark; the Locker is closed when b
// ends.
func Open(b *testing.B, url string, opts ...distlock.Option) *distlock.Locker {
	b.Helper()
	l, err := distlock.Open(context.Background(), url, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}

// Cycle measures acquire + release of one free key: Acquire, or TryAcquire
// when try, then Release, once per b.Loop iteration, with allocations.
func Cycle(b *testing.B, l *distlock.Locker, key string, try bool, opts ...distlock.Option) {
	b.Helper()
	ctx := context.Background()
	acquire := l.Acquire
	if try {
		acquire = l.TryAcquire
	}
	b.ReportAllocs()
	for b.Loop() {
		lease, err := acquire(ctx, key, opts...)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// DistinctKeys has 500×GOMAXPROCS goroutines each cycle TryAcquire +
// Release of its own key on l (no contention): the throughput of many
// independent locks through one Locker.
func DistinctKeys(b *testing.B, l *distlock.Locker) {
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(500) // 1,000 goroutines on 2 CPUs
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("bench/distinct/%d", next.Add(1))
		for pb.Next() {
			lease, err := l.TryAcquire(ctx, key)
			if err != nil {
				b.Error(err)
				return
			}
			if err := lease.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	if n := next.Load(); n != 1000 && b.N >= 1000 {
		b.Logf("%d goroutines", n)
	}
}

// Handoff has goroutines, spread round-robin over lockers, contend for key
// with zero hold time until b.N acquisitions are done. It reports
// handoffs/s, and the release-to-next-acquire latency p50-µs and p99-µs
// measured for acquisitions whose Acquire call had started before the
// release (a waiter that was woken, not one that happened to arrive after
// it), and waited/op, the share of acquisitions that did wait. Callers warm
// the lockers up first and may read their own counters around the call.
func Handoff(b *testing.B, ctx context.Context, lockers []*distlock.Locker, key string, goroutines int) Result {
	b.Helper()
	var (
		base        = time.Now()
		left        atomic.Int64
		lastRelease atomic.Int64 // ns since base, stored just before each Release
		mu          sync.Mutex
		samples     []time.Duration
		wg          sync.WaitGroup
		failed      atomic.Pointer[error]
	)
	left.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	for g := range goroutines {
		l := lockers[g%len(lockers)]
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				samples = append(samples, mine...)
				mu.Unlock()
			}()
			for left.Add(-1) >= 0 {
				called := int64(time.Since(base))
				lease, err := l.Acquire(ctx, key)
				if err != nil {
					failed.Store(&err)
					return
				}
				got := int64(time.Since(base))
				if rel := lastRelease.Load(); rel > called {
					mine = append(mine, time.Duration(got-rel))
				}
				lastRelease.Store(int64(time.Since(base)))
				if err := lease.Release(ctx); err != nil {
					failed.Store(&err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handoffs/s")
	var r Result
	if len(samples) == 0 {
		return r
	}
	slices.Sort(samples)
	r.P50, r.P99 = samples[(len(samples)-1)/2], samples[(len(samples)-1)*99/100]
	b.ReportMetric(float64(r.P50)/float64(time.Microsecond), "p50-µs")
	b.ReportMetric(float64(r.P99)/float64(time.Microsecond), "p99-µs")
	b.ReportMetric(float64(len(samples))/float64(b.N), "waited/op")
	return r
}

// Result is what Handoff measured.
type Result struct {
	P50, P99 time.Duration // release-to-next-acquire latency of waiters
}
