package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/mysql"
)

// fuKeys counts the keys of a forupdate table (kind-0 rows; floor rows
// are kind 2).
func fuKeys(t testing.TB, ctx context.Context, admin *sql.DB, table string) int {
	return countRows(t, ctx, admin, table, "kind = 0")
}

// Forupdate mode's cleanup deletes the rows of free keys, never a held
// one's (its row is locked and skipped), and a key locked again after its
// rows went — or a never-locked key of the same bucket — gets a token above
// every token its bucket issued.
func TestForUpdateCleanupKeepsTokensIncreasing(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	table := uniqueTable("fucleanup")
	ctx := ctxT(t, time.Minute)
	l := fuLocker(t, openDB(t, config(t, srv)), table, mysql.WithCleanup(0, 0, 1))
	sqltest.CleanupKeepsTokens(t, ctx, l,
		func() (int, error) { return mysql.CleanupNow(ctx, l, 0, 1) },
		func() int { return fuKeys(t, ctx, admin, table) })
	if n := countRows(t, ctx, admin, table, "kind = 1"); n != 3 {
		t.Errorf("%d fence rows, want 3 (the keys locked since the cleanup)", n)
	}
}

// A key granted less than the grace period ago is kept.
func TestForUpdateCleanupGrace(t *testing.T) {
	srv := server(t)
	table := uniqueTable("fugrace")
	ctx := ctxT(t, time.Minute)
	l := fuLocker(t, openDB(t, config(t, srv)), table, mysql.WithCleanup(0, 0, 1))
	sqltest.AcquireRelease(t, ctx, l, "recent")
	if n, err := mysql.CleanupNow(ctx, l, time.Hour, 10); err != nil || n != 0 {
		t.Fatalf("cleanup with a 1h grace deleted %d (%v), want 0", n, err)
	}
	if n, err := mysql.CleanupNow(ctx, l, 0, 10); err != nil || n != 1 {
		t.Fatalf("cleanup with no grace deleted %d (%v), want 1", n, err)
	}
}

// The grant statement reads its bucket's floor with a shared lock: the
// first grant of a new key waits for a transaction that raised the floor,
// and then starts above it.
func TestForUpdateFloorReadIsLocking(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	table := uniqueTable("fufloorlock")
	ctx := ctxT(t, time.Minute)
	l := fuLocker(t, openDB(t, config(t, srv)), table, mysql.WithCleanup(0, 0, 1))
	keys := sqltest.KeysInBucket("fufloorlock", 5, 2)
	sqltest.AcquireRelease(t, ctx, l, keys[0]) // creates the table and floors
	expectFloorWaited(t, ctx, admin, l, keys[1], "UPDATE `"+table+"` SET fence = 1000 WHERE key_hash = ? AND kind = 2")
}

// Cleanups of many Lockers racing acquisitions of the same keys: every
// key's tokens, in the order the holders got them, strictly increase.
func TestForUpdateCleanupConcurrent(t *testing.T) {
	srv := server(t)
	table := uniqueTable("fucleanconc")
	ctx := ctxT(t, 2*time.Minute)
	var lockers []*distlock.Locker
	for range 3 {
		lockers = append(lockers, fuLocker(t, openDB(t, config(t, srv)), table, mysql.WithCleanup(0, 0, 1)))
	}
	raceCleanups(t, ctx, lockers)
}

// A forupdate table without granted_at is refused with the ALTER that adds
// it when the Locker does not manage the schema, and upgraded in place
// (fences kept) when it does.
func TestForUpdateSchemaUpgradeGrantedAt(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	table := uniqueTable("fuold")
	ctx := ctxT(t, time.Minute)
	ddl, err := mysql.DDL(mysql.ModeForUpdate, table)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, "ALTER TABLE `"+table+"` DROP COLUMN granted_at"); err != nil {
		t.Fatal(err)
	}
	h := mysqlKeyHash("old")
	if _, err := admin.ExecContext(ctx, "INSERT INTO `"+table+"` (key_hash, kind, lock_key, fence) VALUES (?, 0, 'old', 0), (?, 1, 'old', 41)", h[:], h[:]); err != nil {
		t.Fatal(err)
	}
	manual := fuLocker(t, openDB(t, config(t, srv)), table, mysql.WithCreateTable(false))
	_, err = manual.TryAcquire(ctx, "old")
	if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "ALTER TABLE `"+table+"` ADD COLUMN granted_at") {
		t.Fatalf("table without granted_at, without WithCreateTable: %v, want ErrInvalidOption naming the ALTER TABLE", err)
	}
	managed := fuLocker(t, openDB(t, config(t, srv)), table, mysql.WithCleanup(0, 0, 1))
	if tok := sqltest.AcquireRelease(t, ctx, managed, "old"); tok != 42 {
		t.Errorf("token %d after the upgrade, want 42 (the fence kept)", tok)
	}
	if n, err := mysql.CleanupNow(ctx, managed, 0, 10); err != nil || n != 1 {
		t.Fatalf("cleanup deleted %d (%v), want 1", n, err)
	}
	if tok := sqltest.AcquireRelease(t, ctx, manual, "old"); tok != 43 {
		t.Errorf("token %d after cleanup, want 43", tok)
	}
}
