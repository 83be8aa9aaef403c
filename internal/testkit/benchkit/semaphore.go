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
//   - acquire-all/k: AcquireAll+Release of k keys (k = 1, 4): in one
//     request where the backend can (backend.MultiAcquirer), else one
//     after another in sorted order;
//   - acquire-all/4-one-by-one: the same through a wrapper that hides the
//     backend, so the keys are always taken one by one: k round trips.
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
	for _, c := range []struct {
		name string
		k    int
		l    distlock.Locker
	}{{"acquire-all/1", 1, l}, {"acquire-all/4", 4, l}, {"acquire-all/4-one-by-one", 4, opaque{l}}} {
		k, l := c.k, c.l
		b.Run(c.name, func(b *testing.B) {
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

// opaque hides a Locker's driver (it has no Unwrap): AcquireAll takes its
// keys one by one.
type opaque struct{ distlock.Locker }
