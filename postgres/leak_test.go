package postgres_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testkit/sqltest"
)

// Nothing leaks: after Close the goroutines are back to the baseline, no
// lease row or advisory lock is held, and no session of the Lockers is left
// on the server.
func TestNoLeaks(t *testing.T) {
	srv := server(t)
	admin := openPool(t, srv, nil)
	ctx := ctxT(t, 2*time.Minute)
	sessions := func() int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := admin.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	baseSessions := sessions()
	rowTable, advTable := uniqueTable("leak_row"), uniqueTable("leak_adv")
	sqltest.NoLeaks(t, ctx, []string{
		pgURL(srv, "mode=row&table="+rowTable),
		pgURL(srv, "mode=row&notify=true&table="+rowTable),
		pgURL(srv, "mode=advisory&keepalive=100ms&table="+advTable),
	})
	if held, err := heldRows(ctx, admin, rowTable); err != nil || len(held) != 0 {
		t.Errorf("row mode: still held after Close: %q (%v)", held, err)
	}
	if held, err := heldAdvisory(ctx, admin, advTable); err != nil || len(held) != 0 {
		t.Errorf("advisory mode: still held after Close: %q (%v)", held, err)
	}
	if !sqltest.Until(5*time.Second, func() bool { return sessions() <= baseSessions }) {
		t.Errorf("%d server sessions after Close, %d before", sessions(), baseSessions)
	}
}
