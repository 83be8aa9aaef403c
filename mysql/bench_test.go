package mysql_test

import (
	"context"
	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/benchkit"
	"testing"
	"time"

	"github.com/distlock/distlock/mysql"
)

var benchModes = []mysql.Mode{mysql.ModeRow, mysql.ModeForUpdate}

// BenchmarkUncontended is TryAcquire+Release of a free lock; roundtrips/op
// counts the commands that waited for a reply (read off the wire).
func BenchmarkUncontended(b *testing.B) {
	for _, mode := range benchModes {
		b.Run(string(mode), func(b *testing.B) {
			srv := server(b)
			w := &wire{}
			l := mustNew(b, wiredDB(b, srv, w), mysql.WithMode(mode), mysql.WithTable(uniqueTable("bench")))
			defer l.Close()
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
			cycle() // table, row, connections
			w.reset()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cycle()
			}
			b.StopTimer()
			b.ReportMetric(float64(w.roundTrips())/float64(b.N), "roundtrips/op")
		})
	}
}

// BenchmarkHandoff passes one hot key among 4 Lockers × 2 goroutines with
// Acquire. Handoff latency is from the holder's Release call to the return
// of the next holder's Acquire, counted when that Acquire was already
// waiting: forupdate waits in the server (InnoDB wakes the waiter on
// COMMIT), row mode polls.
func BenchmarkHandoff(b *testing.B) {
	for _, mode := range benchModes {
		b.Run(string(mode), func(b *testing.B) {
			srv := server(b)
			table := uniqueTable("handoff")
			const lockers, perLocker = 4, 2
			ls := make([]*mysql.Locker, lockers)
			for i := range ls {
				ls[i] = mustNew(b, openDB(b, config(b, srv)), mysql.WithMode(mode), mysql.WithTable(table))
				defer ls[i].Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			lease, err := ls[0].TryAcquire(ctx, "bench/hot")
			if err != nil {
				b.Fatal(err)
			}
			_ = lease.Release(ctx)
			all := make([]distlock.Locker, len(ls))
			for i, l := range ls {
				all[i] = l
			}
			benchkit.Handoff(b, ctx, all, "bench/hot", lockers*perLocker)
		})
	}
}
