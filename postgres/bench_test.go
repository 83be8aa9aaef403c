package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/postgres"
)

// BenchmarkUncontended is TryAcquire+Release of a free lock in each mode;
// statements/op counts the statements sent (each one round trip).
func BenchmarkUncontended(b *testing.B) {
	for _, mode := range []postgres.Mode{postgres.ModeRow, postgres.ModeAdvisory} {
		b.Run(string(mode), func(b *testing.B) {
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
			l := postgres.New(pool, postgres.WithMode(mode), postgres.WithTable(uniqueTable("bench")), postgres.WithCreateTable(true))
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
