package postgres_test

import (
	"testing"

	"github.com/distlock/distlock/internal/testkit/benchkit"
	"github.com/distlock/distlock/postgres"
)

// BenchmarkSemaphore: permits (one transaction of four statements) and
// AcquireAll in row mode, beside the lock (benchkit.Semaphores).
func BenchmarkSemaphore(b *testing.B) {
	l := mustNew(b, openPool(b, server(b), nil), postgres.WithTable(uniqueTable("bench_sem")), postgres.WithCreateTable(true))
	defer l.Close()
	benchkit.Semaphores(b, l)
}
