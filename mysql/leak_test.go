package mysql_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testkit/sqltest"
)

// Nothing leaks: after Close the goroutines are back to the baseline, no
// row is held, no transaction is open and no connection of the Lockers is
// left on the server.
func TestNoLeaks(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	admin.SetMaxOpenConns(1)
	var baseConns int
	if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?", srv.User).Scan(&baseConns); err != nil {
		t.Fatal(err)
	}
	rowTable, fuTable := uniqueTable("leak_row"), uniqueTable("leak_fu")
	ctx := ctxT(t, 2*time.Minute)
	sqltest.NoLeaks(t, ctx, []string{mysqlURL(srv, "mode=row&table="+rowTable), mysqlURL(srv, "mode=forupdate&keepalive=100ms&table="+fuTable)})
	var n int
	if err := admin.QueryRow("SELECT COUNT(*) FROM `" + rowTable + "` WHERE holds > 0 OR expires_at > UTC_TIMESTAMP(6)").Scan(&n); err != nil || n != 0 {
		t.Errorf("row mode: %d rows still held after Close (%v)", n, err)
	}
	locked, err := lockedRows(ctx, admin, fuTable)
	if err != nil || len(locked) != 0 {
		t.Errorf("forupdate: rows still locked after Close: %q (%v)", locked, err)
	}
	if n := openTrx(t, admin); n != 0 {
		t.Errorf("%d transactions open after Close", n)
	}
	sqltest.Until(5*time.Second, func() bool {
		if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?", srv.User).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n <= baseConns
	})
	if n > baseConns {
		t.Errorf("%d server connections after Close, %d before", n, baseConns)
	}
}
