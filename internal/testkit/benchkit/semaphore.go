package benchkit

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// Semaphores runs, as sub-benchmarks on l, uncontended cycles of:
//
//   - lock: TryAcquire+Release of a lock (the baseline);
//   - permit: TryAcquire+Release of one of 4 permits of a semaphore;
//   - permit-held3: the same with the 3 other permits held (the count the
//     acquire script or statement looks at);
//   - permit-paired: lock and permit cycles alternating in blocks of 50,
//     reporting the median cycle of each (µs) and their ratio;
//   - acquire-all/k: AcquireAll+Release of k keys (k = 1, 4): in one
//     request where the backend can (backend.MultiAcquirer), else one
//     after another in sorted order;
//   - acquire-all/4-one-by-one: the same through a wrapper that hides the
//     backend, so the keys are always taken one by one: k round trips;
//   - acquire-all/4-paired: the two ways alternating in blocks of 50, the
//     AcquireAll call alone timed (not the release), reporting the median
//     of each (µs) and their ratio: the comparison that survives a noisy
//     machine.
func Semaphores(b *testing.B, l *distlock.Locker) {
	ctx := context.Background()
	b.Run("lock", func(b *testing.B) { Cycle(b, l, "bench/sem-lock", true) })
	permit := func(b *testing.B, key string, held int) {
		s, err := l.Semaphore(key, 4)
		if err != nil {
			b.Fatal(err)
		}
		for range held {
			p, err := s.TryAcquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Release(ctx)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			p, err := s.TryAcquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("permit", func(b *testing.B) { permit(b, "bench/sem", 0) })
	b.Run("permit-held3", func(b *testing.B) { permit(b, "bench/sem-held", 3) })
	b.Run("permit-paired", func(b *testing.B) {
		s, err := l.Semaphore("bench/sem-paired", 4)
		if err != nil {
			b.Fatal(err)
		}
		cycles := [2]func() (*distlock.Lease, error){
			func() (*distlock.Lease, error) { return l.TryAcquire(ctx, "bench/lock-paired") },
			func() (*distlock.Lease, error) { return s.TryAcquire(ctx) },
		}
		paired(b, "lock-µs", "permit-µs", func(w int) {
			p, err := cycles[w]()
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Release(ctx); err != nil {
				b.Fatal(err)
			}
		})
	})
	all := func(keys []string) (func(), error) {
		m, err := l.AcquireAll(ctx, keys)
		if err != nil {
			return nil, err
		}
		return func() {
			if err := m.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}, nil
	}
	oneByOne := func(keys []string) (func(), error) { return acquireOneByOne(ctx, l, keys) }
	for _, c := range []struct {
		name string
		k    int
		take func([]string) (func(), error)
	}{{"acquire-all/1", 1, all}, {"acquire-all/4", 4, all}, {"acquire-all/4-one-by-one", 4, oneByOne}} {
		k, take := c.k, c.take
		b.Run(c.name, func(b *testing.B) {
			keys := make([]string, k)
			for i := range keys {
				keys[i] = fmt.Sprintf("bench/multi/%d", i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				release, err := take(keys)
				if err != nil {
					b.Fatal(err)
				}
				release()
			}
		})
	}
	b.Run("acquire-all/4-paired", func(b *testing.B) {
		keys := []string{"bench/pair/0", "bench/pair/1", "bench/pair/2", "bench/pair/3"}
		ways := []func([]string) (func(), error){all, oneByOne}
		var release func()
		paired(b, "one-request-µs", "one-by-one-µs", func(w int) {
			var err error
			if release, err = ways[w](keys); err != nil {
				b.Fatal(err)
			}
		}, func() { release() })
	})
}

// acquireOneByOne takes keys (sorted) one Acquire each, as AcquireAll does
// on a backend that cannot take several keys in one request, and returns
// what releases them.
func acquireOneByOne(ctx context.Context, l *distlock.Locker, keys []string) (func(), error) {
	leases := make([]*distlock.Lease, 0, len(keys))
	release := func() {
		for _, ls := range leases {
			_ = ls.Release(ctx)
		}
	}
	for _, k := range slices.Sorted(slices.Values(keys)) {
		ls, err := l.Acquire(ctx, k)
		if err != nil {
			release()
			return nil, err
		}
		leases = append(leases, ls)
	}
	return release, nil
}

// paired runs two ways of doing one thing, alternating in blocks of 50
// (run(0), run(1)), times run alone (not after, untimed, if given), and
// reports the median of each under the names a and b and the ratio a/b.
func paired(b *testing.B, a, bName string, run func(way int), after ...func()) {
	took := [2][]time.Duration{}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		w := (i / 50) % 2
		start := time.Now()
		run(w)
		took[w] = append(took[w], time.Since(start))
		for _, f := range after {
			f()
		}
	}
	if len(took[1]) == 0 {
		return
	}
	x, y := median(took[0]), median(took[1])
	b.ReportMetric(float64(x.Microseconds()), a)
	b.ReportMetric(float64(y.Microseconds()), bName)
	b.ReportMetric(float64(x)/float64(y), "ratio")
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}
