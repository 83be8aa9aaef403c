package mysql_test

import (
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/mysql"
)

var benchModes = []mysql.Mode{mysql.ModeRow, mysql.ModeForUpdate}

// BenchmarkUncontended is TryAcquire+Release of a free lock; roundtrips/op
// counts the commands that waited for a reply (read off the wire).
func BenchmarkUncontended(b *testing.B) {
	for _, mode := range benchModes {
		b.Run(string(mode), func(b *testing.B) {
			w := &wire{}
			l := mustNew(b, wiredDB(b, server(b), w), mysql.WithMode(mode), mysql.WithTable(uniqueTable("bench")))
			defer l.Close()
			sqltest.Uncontended(b, l, "roundtrips/op", w.reset, w.roundTrips)
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
			ls := make([]distlock.Locker, 4)
			for i := range ls {
				l := mustNew(b, openDB(b, config(b, srv)), mysql.WithMode(mode), mysql.WithTable(table))
				defer l.Close()
				ls[i] = l
			}
			sqltest.Handoff(b, ls)
		})
	}
}
