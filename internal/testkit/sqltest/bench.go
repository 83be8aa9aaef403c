package sqltest

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/benchkit"
)

// Uncontended is TryAcquire+Release of a free lock on l; the metric unit
// counts, per cycle, what count reports (reset clears it after the warm-up
// cycle that creates the table, the row and the connections).
func Uncontended(b *testing.B, l *distlock.Locker, unit string, reset func(), count func() int) {
	ctx := context.Background()
	cycle := func() {
		lease, err := l.TryAcquire(ctx, "bench/uncontended")
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cycle()
	reset()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cycle()
	}
	b.StopTimer()
	b.ReportMetric(float64(count())/float64(b.N), unit)
}

// Handoff passes one hot key among the Lockers, 2 goroutines each, with
// Acquire (benchkit.Handoff), after one warm-up acquisition.
func Handoff(b *testing.B, ls []*distlock.Locker) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	lease, err := ls[0].TryAcquire(ctx, "bench/hot")
	if err != nil {
		b.Fatal(err)
	}
	_ = lease.Release(ctx)
	benchkit.Handoff(b, ctx, ls, "bench/hot", 2*len(ls))
}
