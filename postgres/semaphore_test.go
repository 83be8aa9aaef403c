package postgres_test

import (
	"testing"

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
