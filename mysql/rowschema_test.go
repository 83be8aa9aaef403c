package mysql_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/mysql"
)

// oldRowDDL is the row-mode table of the releases that kept one request id
// per row (acq_id) instead of one id per hold.
const oldRowDDL = `CREATE TABLE %s (
  key_hash   BINARY(32)      NOT NULL,
  lock_key   VARBINARY(1024) NOT NULL,
  owner      VARBINARY(256)  NOT NULL,
  holds      INT UNSIGNED    NOT NULL,
  expires_at DATETIME(6)     NOT NULL,
  fence      BIGINT UNSIGNED NOT NULL,
  acq_id     BINARY(16)      NULL,
  PRIMARY KEY (key_hash)
) ENGINE=InnoDB`

// A table of the old shape is refused with the statement that upgrades it
// when the Locker does not manage the schema, and upgraded in place (its
// rows and fences kept) when it does.
func TestRowSchemaUpgrade(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	table := uniqueTable("oldshape")
	ctx := ctxT(t, time.Minute)
	if _, err := admin.ExecContext(ctx, strings.Replace(oldRowDDL, "%s", "`"+table+"`", 1)); err != nil {
		t.Fatal(err)
	}
	h := mysqlKeyHash("old")
	if _, err := admin.ExecContext(ctx, "INSERT INTO `"+table+"` VALUES (?, 'old', 'x', 0, '1970-01-01 00:00:01', 41, NULL)", h[:]); err != nil {
		t.Fatal(err)
	}

	manual := mustNew(t, openDB(t, config(t, srv)), mysql.WithTable(table), mysql.WithCreateTable(false))
	defer manual.Close()
	_, err := manual.TryAcquire(ctx, "old")
	if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "ALTER TABLE `"+table+"` ADD COLUMN hold_ids") {
		t.Fatalf("old table without WithCreateTable: %v, want ErrInvalidOption naming the ALTER TABLE", err)
	}

	managed := mustNew(t, openDB(t, config(t, srv)), mysql.WithTable(table))
	defer managed.Close()
	lease, err := managed.TryAcquire(ctx, "old")
	if err != nil {
		t.Fatalf("old table with WithCreateTable (the default): %v", err)
	}
	if lease.Token() != 42 {
		t.Errorf("token %d after the upgrade, want 42 (the row's fence kept)", lease.Token())
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The upgraded table now serves the Locker that refused it.
	lease, err = manual.TryAcquire(ctx, "old")
	if err != nil {
		t.Fatalf("after the upgrade, without WithCreateTable: %v", err)
	}
	_ = lease.Release(ctx)
}
