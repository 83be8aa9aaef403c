package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/postgres"
)

// leaseRows counts the lease rows of table (floor rows excluded).
func leaseRows(t testing.TB, ctx context.Context, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM "`+table+`" WHERE lock_key < '\xff'::bytea`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Cleanup deletes the rows of free locks, never a held one, and a key
// locked again after its row went — or a never-locked key of the same
// bucket — gets a token above every token its bucket issued.
func TestRowCleanupKeepsTokensIncreasing(t *testing.T) {
	srv := server(t)
	pool := openPool(t, srv, nil)
	table := uniqueTable("cleanup")
	ctx := ctxT(t, time.Minute)
	l := mustNew(t, pool, postgres.WithTable(table), postgres.WithCreateTable(true), postgres.WithCleanup(0, 0, 1))
	defer l.Close()
	sqltest.CleanupKeepsTokens(t, ctx, l,
		func() (int, error) { return postgres.CleanupNow(ctx, l, 0, 1) },
		func() int { return leaseRows(t, ctx, pool, table) })
}

// An acquisition waits for a transaction holding the table in SHARE ROW
// EXCLUSIVE mode (as a cleanup pass does) and takes its snapshot after it:
// a floor raised by that transaction is seen.
func TestRowAcquireWaitsForCleanupLock(t *testing.T) {
	srv := server(t)
	pool := openPool(t, srv, nil)
	table := uniqueTable("floorlock")
	ctx := ctxT(t, time.Minute)
	l := mustNew(t, pool, postgres.WithTable(table), postgres.WithCreateTable(true), postgres.WithCleanup(0, 0, 1))
	defer l.Close()
	keys := sqltest.KeysInBucket("floorlock", 3, 2)
	sqltest.AcquireRelease(t, ctx, l, keys[0])
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE "`+table+`" IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO "`+table+`" (lock_key, owner, holds, expires_at, fence) VALUES ($1, '', '{}', 'epoch', 1000)`, postgres.FloorKey(keys[1])); err != nil {
		t.Fatal(err)
	}
	tok := sqltest.TokenAfterCommit(t, ctx, l, keys[1], 10*time.Millisecond, func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE relation = $1::regclass AND NOT granted`, table).Scan(&n)
		return err == nil && n > 0
	}, func() error { return tx.Commit(ctx) })
	if tok != 1001 {
		t.Errorf("new key's first token %d, want 1001 (the raised floor + 1)", tok)
	}
}

// Many processes' cleanups running against acquisitions of the same keys:
// every key's tokens strictly increase.
func TestRowCleanupConcurrent(t *testing.T) {
	srv := server(t)
	table := uniqueTable("cleanconc")
	ctx := ctxT(t, 2*time.Minute)
	var lockers []*distlock.Locker
	var ls []*distlock.Locker
	for range 3 {
		l := mustNew(t, openPool(t, srv, nil), postgres.WithTable(table), postgres.WithCreateTable(true), postgres.WithCleanup(0, 0, 1))
		defer l.Close()
		lockers, ls = append(lockers, l), append(ls, l)
	}
	sqltest.CleanupRace(t, ctx, ls, func(ctx context.Context, i int) error {
		_, err := postgres.CleanupNow(ctx, lockers[i], 0, 3)
		return err
	})
}

// A row table without the metadata column is refused, with the ALTER
// TABLE that upgrades it, when the Locker does not manage the schema, and
// upgraded in place (fences kept) when it does.
func TestRowSchemaUpgrade(t *testing.T) {
	srv := server(t)
	pool := openPool(t, srv, nil)
	table := uniqueTable("oldshape")
	ctx := ctxT(t, time.Minute)
	if _, err := pool.Exec(ctx, `CREATE TABLE "`+table+`" (lock_key bytea PRIMARY KEY, owner bytea NOT NULL, holds bytea[] NOT NULL, expires_at timestamptz NOT NULL, fence bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO "`+table+`" VALUES ('old', 'x', '{}', 'epoch', 41)`); err != nil {
		t.Fatal(err)
	}
	manual := mustNew(t, pool, postgres.WithTable(table))
	defer manual.Close()
	_, err := manual.TryAcquire(ctx, "old")
	if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), `ALTER TABLE "`+table+`" ADD COLUMN IF NOT EXISTS metadata bytea`) {
		t.Fatalf("old table without WithCreateTable: %v, want ErrInvalidOption naming the ALTER TABLE", err)
	}
	managed := mustNew(t, pool, postgres.WithTable(table), postgres.WithCreateTable(true))
	defer managed.Close()
	lease, err := managed.TryAcquire(ctx, "old", distlock.WithMetadata("md"))
	if err != nil {
		t.Fatalf("old table with WithCreateTable: %v", err)
	}
	if lease.Token() != 42 {
		t.Errorf("token %d after the upgrade, want 42 (the row's fence kept)", lease.Token())
	}
	if info, err := manual.Inspect(ctx, "old"); err != nil || info.Metadata != "md" {
		t.Errorf("Inspect after the upgrade = %+v, %v", info, err)
	}
	_ = lease.Release(ctx)
}
