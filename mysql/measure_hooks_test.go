package mysql_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock/mysql"
)

func measureOpts(table string) []mysql.Option {
	return []mysql.Option{mysql.WithTable(table), mysql.WithCleanup(0, 0, 1)}
}

func forceCleanup(t testing.TB, ctx context.Context, l *mysql.Locker) int {
	n, err := mysql.CleanupNow(ctx, l, 0, 5000)
	if err != nil {
		t.Fatal(err)
	}
	for m := n; m > 0 && err == nil; n += m { // RunCleanup stops after 20 passes
		m, err = mysql.CleanupNow(ctx, l, 0, 5000)
	}
	return n
}
