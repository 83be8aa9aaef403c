package benchkit

import (
	"context"
	"fmt"
	"testing"

	"github.com/distlock/distlock"
)

// Semaphores runs, as sub-benchmarks on l, uncontended cycles of:
//
//   - lock: TryAcquire+Release of a lock (the baseline);
//   - permit: TryAcquire+Release of one of 4 permits of a semaphore;
//   - permit-held3: the same with the 3 other permits held (the count the
//     acquire script or statement looks at);
//   - acquire-all/k: AcquireAll+Release of k keys (k = 1, 4), which takes
//     the keys one after another in sorted order: k round trips each way.
func Semaphores(b *testing.B, l distlock.Locker) {
	ctx := context.Background()
	b.Run("lock", func(b *testing.B) { Cycle(b, l, "bench/sem-lock", true) })
	permit := func(b *testing.B, key string, held int) {
		s, err := distlock.NewSemaphore(l, key, 4)
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
	for _, k := range []int{1, 4} {
		b.Run(fmt.Sprintf("acquire-all/%d", k), func(b *testing.B) {
			keys := make([]string, k)
			for i := range keys {
				keys[i] = fmt.Sprintf("bench/multi/%d", i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				m, err := distlock.AcquireAll(ctx, l, keys)
				if err != nil {
					b.Fatal(err)
				}
				if err := m.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
