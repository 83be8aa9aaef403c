package postgres_test

import (
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/sqltest"
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
			pool, tr := tracedPool(b, server(b))
			l := mustNew(b, pool, append(mode.opts, postgres.WithTable(uniqueTable("bench")), postgres.WithCreateTable(true))...)
			defer l.Close()
			var before int64
			sqltest.Uncontended(b, l, "statements/op", func() { before = tr.n.Load() }, func() int { return int(tr.n.Load() - before) })
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
			all := make([]*distlock.Locker, 4)
			for i := range all {
				l := mustNew(b, openPool(b, srv, nil), append(mode.opts, postgres.WithTable(table), postgres.WithCreateTable(true))...)
				defer l.Close()
				all[i] = l
			}
			sqltest.Handoff(b, all)
		})
	}
}
