package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"

	"github.com/distlock/distlock/internal/sqllock/permittest"
	"github.com/distlock/distlock/postgres"
)

// A permit's statements: its acquisition is one transaction (begin, lock
// the semaphore's row and read its count, purge expired permits and count
// the live ones, raise the fence and insert the permit, commit); a refusal
// commits after the count (keeping the purge); Refresh and Release are one
// statement each, held or not.
func TestPermitRoundTrips(t *testing.T) {
	pool, tr := tracedPool(t, server(t))
	l := mustNew(t, pool, postgres.WithTable(uniqueTable("prt")), postgres.WithCreateTable(true))
	defer l.Close()
	permittest.RoundTrips(t, l, postgres.Driver(l), permittest.Statements{Grant: 5, Refuse: 4}, func() int { return int(tr.n.Load()) })
}

// With the schema managed by the user and the permit table not created, a
// permit's acquisition says that the permit table is missing (not the lock
// table, which exists), as ErrMisconfigured.
func TestPermitTableMissing(t *testing.T) {
	pool := openPool(t, server(t), nil)
	table := uniqueTable("nopermits")
	ddl, err := postgres.DDL(postgres.ModeRow, table)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, time.Minute)
	if _, err := pool.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	l := mustNew(t, pool, postgres.WithTable(table), postgres.WithCreateTable(false))
	defer l.Close()
	s, err := l.Semaphore("k", 2)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.TryAcquire(ctx)
	if !errors.Is(err, distlock.ErrMisconfigured) || !strings.Contains(err.Error(), "the permit table is missing") || strings.Contains(err.Error(), "lock table is missing") {
		t.Fatalf("want ErrMisconfigured saying the permit table is missing, got %v", err)
	}
}
