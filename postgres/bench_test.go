package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/benchkit"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/postgres"
)

// benchModes are the configurations benchmarked: row mode polling, row
// mode with LISTEN/NOTIFY, advisory mode.
var benchModes = []struct {
	name string
	opts []postgres.Option
}{
	{"row", []postgres.Option{postgres.WithMode(postgres.ModeRow)}},
	{"row-notify", []postgres.Option{postgres.WithMode(postgres.ModeRow), postgres.WithNotify(true)}},
	{"advisory", []postgres.Option{postgres.WithMode(postgres.ModeAdvisory)}},
}

// BenchmarkUncontended is TryAcquire+Release of a free lock in each mode;
// statements/op counts the statements sent (each one round trip).
func BenchmarkUncontended(b *testing.B) {
	for _, mode := range benchModes {
		b.Run(mode.name, func(b *testing.B) {
			srv := server(b)
			cfg, err := pgxpool.ParseConfig(srv.DSN())
			if err != nil {
				b.Fatal(err)
			}
			tr := &countTracer{}
			cfg.ConnConfig.Tracer = tr
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			l := mustNew(b, pool, append(mode.opts, postgres.WithTable(uniqueTable("bench")), postgres.WithCreateTable(true))...)
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
			cycle() // table, row, connections, lock id
			before := tr.n.Load()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cycle()
			}
			b.StopTimer()
			b.ReportMetric(float64(tr.n.Load()-before)/float64(b.N), "statements/op")
		})
	}
}

// BenchmarkHandoff passes one hot key among 4 Lockers × 2 goroutines with
// Acquire. Handoff latency is from the holder's Release call to the return
// of the next holder's Acquire, counted when that Acquire was already
// waiting: advisory waits in the server (pg_advisory_lock returns when the
// lock is freed), row mode polls, row-notify is woken by NOTIFY.
func BenchmarkHandoff(b *testing.B) {
	for _, mode := range benchModes {
		b.Run(mode.name, func(b *testing.B) {
			srv := server(b)
			table := uniqueTable("handoff")
			const lockers, perLocker = 4, 2
			all := make([]distlock.Locker, lockers)
			for i := range all {
				l := mustNew(b, openPool(b, srv, nil), append(mode.opts, postgres.WithTable(table), postgres.WithCreateTable(true))...)
				defer l.Close()
				all[i] = l
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			lease, err := all[0].TryAcquire(ctx, "bench/hot")
			if err != nil {
				b.Fatal(err)
			}
			_ = lease.Release(ctx)
			benchkit.Handoff(b, ctx, all, "bench/hot", lockers*perLocker)
		})
	}
}
