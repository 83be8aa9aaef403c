package etcd

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// benchHeld is the number of locks BenchmarkHeldLocks holds at once.
const benchHeld = 10000

// heldScale is one library holding many locks at once.
type heldScale struct {
	bytesPerLock      float64 // live heap per held lock
	goroutinesPerLock float64 // goroutines added per held lock
}

// measureHeld acquires n distinct keys through acquire (32 goroutines at
// once), and returns the live heap and goroutines they added, then
// releases them. Every release is kept, as a caller holding the locks
// would keep its handles.
func measureHeld(b *testing.B, n int, acquire func(key string) (func() error, error)) heldScale {
	b.Helper()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	releases := make([]func() error, n)
	var (
		next  atomic.Int64
		first error
		emu   sync.Mutex
		wg    sync.WaitGroup
	)
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				r, err := acquire(fmt.Sprintf("held/%d", i))
				if err != nil {
					emu.Lock()
					if first == nil {
						first = err
					}
					emu.Unlock()
					return
				}
				releases[i] = r
			}
		})
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
	time.Sleep(200 * time.Millisecond) // let watches and keepalives settle
	runtime.GC()
	runtime.ReadMemStats(&m1)
	g1 := runtime.NumGoroutine()
	for _, r := range releases {
		if err := r(); err != nil {
			b.Fatal(err)
		}
	}
	return heldScale{
		bytesPerLock:      float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / float64(n),
		goroutinesPerLock: float64(g1-g0) / float64(n),
	}
}

// benchClient is a client of its own on the shared cluster, closed when b
// ends.
func benchClient(b *testing.B) *clientv3.Client {
	b.Helper()
	c := adminClient(b, cluster(b).Addrs()...)
	// Warm up the connection.
	if _, err := c.Get(context.Background(), "warm"); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkHeldLocks holds 10,000 locks at once through one Locker (one
// session) and through one concurrency.Session with a concurrency.Mutex
// per key, and reports the live heap and goroutines each adds per held
// lock (distlock-B/lock, mutex-B/lock, distlock-goroutines/lock,
// mutex-goroutines/lock). Run it with -benchtime 1x.
func BenchmarkHeldLocks(b *testing.B) {
	for b.Loop() {
		c := benchClient(b)
		l, err := New(c, WithSessionTTL(10*time.Second), WithPrefix(uniquePrefix(b)))
		if err != nil {
			b.Fatal(err)
		}
		warm, err := l.Acquire(context.Background(), "warm")
		if err != nil {
			b.Fatal(err)
		}
		dl := measureHeld(b, benchHeld, func(key string) (func() error, error) {
			lease, err := l.Acquire(context.Background(), key)
			if err != nil {
				return nil, err
			}
			return func() error { return lease.Release(context.Background()) }, nil
		})
		_ = warm.Release(context.Background())
		_ = l.Close()

		mc := benchClient(b)
		s, err := concurrency.NewSession(mc, concurrency.WithTTL(10))
		if err != nil {
			b.Fatal(err)
		}
		pfx := uniquePrefix(b)
		mx := measureHeld(b, benchHeld, func(key string) (func() error, error) {
			m := concurrency.NewMutex(s, pfx+"/"+key)
			if err := m.Lock(context.Background()); err != nil {
				return nil, err
			}
			return func() error { return m.Unlock(context.Background()) }, nil
		})
		_ = s.Close()
		b.ReportMetric(dl.bytesPerLock, "distlock-B/lock")
		b.ReportMetric(dl.goroutinesPerLock, "distlock-goroutines/lock")
		b.ReportMetric(mx.bytesPerLock, "mutex-B/lock")
		b.ReportMetric(mx.goroutinesPerLock, "mutex-goroutines/lock")
	}
}

// BenchmarkUncontended times acquire + release of a free key, one at a
// time, through a Locker and through a concurrency.Mutex on the same
// cluster in the same run, interleaved in blocks of 20 cycles (so that
// both see the same machine), and reports the p50 and p99 of each in µs
// and the ratio of the p50s (distlock/mutex). b.N is the number of
// cycles of each.
func BenchmarkUncontended(b *testing.B) {
	ctx := context.Background()
	c := benchClient(b)
	l, err := New(c, WithSessionTTL(10*time.Second), WithPrefix(uniquePrefix(b)))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	s, err := concurrency.NewSession(c, concurrency.WithTTL(10))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	mpfx := uniquePrefix(b) + "/u"
	dlCycle := func() error {
		lease, err := l.Acquire(ctx, "u")
		if err != nil {
			return err
		}
		return lease.Release(ctx)
	}
	mxCycle := func() error {
		m := concurrency.NewMutex(s, mpfx)
		if err := m.Lock(ctx); err != nil {
			return err
		}
		return m.Unlock(ctx)
	}
	for range 20 { // warm up both
		if err := dlCycle(); err != nil {
			b.Fatal(err)
		}
		if err := mxCycle(); err != nil {
			b.Fatal(err)
		}
	}
	var dl, mx []time.Duration
	timeBlock := func(f func() error, out *[]time.Duration, n int) {
		for range n {
			t0 := time.Now()
			if err := f(); err != nil {
				b.Fatal(err)
			}
			*out = append(*out, time.Since(t0))
		}
	}
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(20, b.N-done)
		if done/20%2 == 0 {
			timeBlock(dlCycle, &dl, n)
			timeBlock(mxCycle, &mx, n)
		} else {
			timeBlock(mxCycle, &mx, n)
			timeBlock(dlCycle, &dl, n)
		}
		done += n
	}
	b.StopTimer()
	q := func(ds []time.Duration, p float64) float64 {
		slices.Sort(ds)
		return float64(ds[int(p*float64(len(ds)-1))].Microseconds())
	}
	b.ReportMetric(q(dl, 0.5), "distlock-p50-µs")
	b.ReportMetric(q(dl, 0.99), "distlock-p99-µs")
	b.ReportMetric(q(mx, 0.5), "mutex-p50-µs")
	b.ReportMetric(q(mx, 0.99), "mutex-p99-µs")
	b.ReportMetric(q(dl, 0.5)/q(mx, 0.5), "p50-ratio")
}
