package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/mysql"
)

// leaseRows counts the lease rows of table (floor rows, whose lock_key is
// empty, excluded).
func leaseRows(t testing.TB, ctx context.Context, admin *sql.DB, table string) int {
	return countRows(t, ctx, admin, table, "lock_key <> ''")
}

// countRows counts the rows of table matching where.
func countRows(t testing.TB, ctx context.Context, admin *sql.DB, table, where string) int {
	t.Helper()
	var n int
	if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+table+"` WHERE "+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Cleanup deletes the rows of free locks, never a held one, and a key
// locked again after its row went — or a never-locked key of the same
// bucket — gets a token above every token its bucket issued.
func TestRowCleanupKeepsTokensIncreasing(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	table := uniqueTable("cleanup")
	ctx := ctxT(t, time.Minute)
	l := mustNew(t, openDB(t, config(t, srv)), mysql.WithTable(table), mysql.WithCleanup(0, 0, 1))
	defer l.Close()
	sqltest.CleanupKeepsTokens(t, ctx, l,
		func() (int, error) { return mysql.CleanupNow(ctx, l, 0, 1) },
		func() int { return leaseRows(t, ctx, admin, table) })
}

// The acquire statement reads its bucket's floor with a shared lock: an
// acquisition of a new key waits for a transaction that raised the floor,
// and then starts above it (a consistent read would start at the old
// floor).
func TestRowFloorReadIsLocking(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	table := uniqueTable("floorlock")
	ctx := ctxT(t, time.Minute)
	l := mustNew(t, openDB(t, config(t, srv)), mysql.WithTable(table), mysql.WithCleanup(0, 0, 1))
	defer l.Close()
	keys := sqltest.KeysInBucket("floorlock", 3, 2)
	sqltest.AcquireRelease(t, ctx, l, keys[0])
	if _, err := mysql.CleanupNow(ctx, l, 0, 10); err != nil { // creates the floor row
		t.Fatal(err)
	}
	expectFloorWaited(t, ctx, admin, l, keys[1], "UPDATE `"+table+"` SET fence = 1000 WHERE key_hash = ?")
}

// expectFloorWaited raises key's floor to 1000 by raise (its argument the
// floor row's hash) in a transaction left open, and checks that a first
// acquisition of key waits for it and then gets 1001: the floor read is
// a locking read.
func expectFloorWaited(t *testing.T, ctx context.Context, admin *sql.DB, l *distlock.Locker, key, raise string) {
	t.Helper()
	tx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	f := mysql.FloorHash(mysqlKeyHash(key))
	if _, err := tx.ExecContext(ctx, raise, f[:]); err != nil {
		t.Fatal(err)
	}
	tok := sqltest.TokenAfterCommit(t, ctx, l, key, 150*time.Millisecond, lockWaitSeen(ctx, admin), tx.Commit)
	if tok != 1001 {
		t.Errorf("new key's first token %d, want 1001 (the raised floor + 1)", tok)
	}
}

// Many processes' cleanups running against acquisitions of the same
// keys: every key's tokens, in the order the holders got them, strictly
// increase.
func TestRowCleanupConcurrent(t *testing.T) {
	srv := server(t)
	table := uniqueTable("cleanconc")
	ctx := ctxT(t, 2*time.Minute)
	var lockers []*distlock.Locker
	for range 3 {
		l := mustNew(t, openDB(t, config(t, srv)), mysql.WithTable(table), mysql.WithCleanup(0, 0, 1))
		defer l.Close()
		lockers = append(lockers, l)
	}
	raceCleanups(t, ctx, lockers)
}

// raceCleanups runs sqltest.CleanupRace over lockers, each cleaning with
// no grace, 3 rows a pass.
func raceCleanups(t *testing.T, ctx context.Context, lockers []*distlock.Locker) {
	t.Helper()
	ls := make([]*distlock.Locker, len(lockers))
	for i, l := range lockers {
		ls[i] = l
	}
	sqltest.CleanupRace(t, ctx, ls, func(ctx context.Context, i int) error {
		_, err := mysql.CleanupNow(ctx, lockers[i], 0, 3)
		return err
	})
}

// lockWaitSeen reports whether some transaction waits for a lock (poll it
// every 150ms or slower: InnoDB's information_schema cache refreshes only
// after 0.1s unread).
func lockWaitSeen(ctx context.Context, admin *sql.DB) func() bool {
	return func() bool {
		var n int
		err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'").Scan(&n)
		return err == nil && n > 0
	}
}

// forcedCleanup runs l's cleanup with no grace until a pass deletes
// nothing, and returns the rows (keys) deleted.
func forcedCleanup(t testing.TB, ctx context.Context, l *distlock.Locker) func() int {
	return func() int {
		deleted := 0
		for {
			m, err := mysql.CleanupNow(ctx, l, 0, 5000)
			if err != nil {
				t.Fatal(err)
			}
			if deleted += m; m == 0 {
				return deleted
			}
		}
	}
}
