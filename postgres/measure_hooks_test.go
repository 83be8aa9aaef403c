package postgres_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock/postgres"
)

func measureOpts(table string) []postgres.Option {
	return []postgres.Option{postgres.WithTable(table), postgres.WithCreateTable(true), postgres.WithCleanup(0, 0, 1)}
}

func forceCleanup(t testing.TB, ctx context.Context, l *postgres.Locker) int {
	n, err := postgres.CleanupNow(ctx, l, 0, 5000)
	if err != nil {
		t.Fatal(err)
	}
	for m := n; m > 0 && err == nil; n += m { // RunCleanup stops after 20 passes
		m, err = postgres.CleanupNow(ctx, l, 0, 5000)
	}
	return n
}
