package mysql_test

import (
	"testing"

	"github.com/distlock/distlock/internal/sqllock/permittest"
	"github.com/distlock/distlock/mysql"
)

// A permit's round trips: its acquisition is one transaction (START
// TRANSACTION, lock the semaphore's row, read its count, purge expired
// permits, count the live ones, raise the fence, insert the permit,
// COMMIT); a refusal commits after the count (keeping the purge); Refresh
// and Release are one statement each, held or not.
func TestPermitRoundTrips(t *testing.T) {
	w := &wire{}
	l := mustNew(t, wiredDB(t, server(t), w), mysql.WithTable(uniqueTable("prt")), mysql.WithCreateTable(true))
	defer l.Close()
	permittest.RoundTrips(t, l, mysql.Driver(l), permittest.Statements{Grant: 8, Refuse: 6}, w.roundTrips)
}
