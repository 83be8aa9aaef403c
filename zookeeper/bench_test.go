package zookeeper

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// go test -run '^$' -bench . -benchtime 2000x ./zookeeper/

func benchLockers(b *testing.B, n int) []*Locker {
	c := ensemble(b)
	base := uniqueBase(b)
	ls := make([]*Locker, n)
	for i := range ls {
		ls[i] = dialT(b, c.Addrs(), WithBasePath(base))
		warm(b, ls[i])
	}
	return ls
}

// BenchmarkAcquireRelease: uncontended Acquire + Release of one key on the
// 3-node ensemble (create, getChildren ∥ exists, delete).
func BenchmarkAcquireRelease(b *testing.B) {
	l := benchLockers(b, 1)[0]
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lease, err := l.Acquire(ctx, "bench/uncontended")
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTryAcquireRelease: uncontended TryAcquire + Release.
func BenchmarkTryAcquireRelease(b *testing.B) {
	l := benchLockers(b, 1)[0]
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lease, err := l.TryAcquire(ctx, "bench/try")
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHotKeyHandoff: 16 goroutines over 4 Lockers (sessions) take
// turns on one key; each op is one acquisition. The handoff latency is the
// time from the start of a holder's Release to the next holder's Acquire
// returning.
func BenchmarkHotKeyHandoff(b *testing.B) {
	const goroutines = 16
	ls := benchLockers(b, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var (
		remaining atomic.Int64
		lastRel   atomic.Int64 // ns since start, 0: none
		mu        sync.Mutex
		lat       []time.Duration
		wg        sync.WaitGroup
	)
	remaining.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := ls[g%len(ls)]
			var mine []time.Duration
			for remaining.Add(-1) >= 0 {
				lease, err := l.Acquire(ctx, "bench/hot")
				if err != nil {
					b.Error(err)
					return
				}
				if rel := lastRel.Load(); rel != 0 {
					mine = append(mine, time.Since(start)-time.Duration(rel))
				}
				lastRel.Store(int64(time.Since(start)))
				if err := lease.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())
	}
	b.ReportMetric(pct(0.50), "p50-handoff-µs")
	b.ReportMetric(pct(0.99), "p99-handoff-µs")
}
