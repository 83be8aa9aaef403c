package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/distlock/distlock/mysql"
)

// closedPortURL is a mysql URL on a loopback port nobody listens on.
func closedPortURL(t testing.TB) string { return "mysql://u:p@" + sqltest.ClosedPort(t) + "/db" }

// badURLs are malformed mysql URLs: each must get ErrInvalidOption.
var badURLs = []string{
	"mysql://u:p@127.0.0.1:3306/db?mode=bogus",
	"mysql://u:p@127.0.0.1:3306/db?table=a;drop%20table%20x",
	"mysql://u:p@127.0.0.1:3306/db?table=%60x%60",
	"mysql://u:p@127.0.0.1:3306/db?table=",
	"mysql://u:p@127.0.0.1:3306/db?table=a.b.c",
	"mysql://u:p@127.0.0.1:3306/db?table=x%27%3B--",
	"mysql://u:p@127.0.0.1:3306/db?keepalive=-1s",
	"mysql://u:p@127.0.0.1:3306/db?cleanup_interval=-1s",
	"mysql://u:p@127.0.0.1:3306/db?cleanup_batch=0",
	"mysql://u:p@127.0.0.1:3306/db?cleanup_grace=forever",
	"mysql://u:p@127.0.0.1:3306/db?keepalive=often",
	"mysql://u:p@127.0.0.1:3306/db?maxConns=0",
	"mysql://u:p@127.0.0.1:3306/db?createTable=maybe",
	"mysql://u:p@127.0.0.1:3306/db?tls=bogus",
	"mysql://u:p@127.0.0.1:3306/db?timeout=0s",
	"mysql://u:p@127.0.0.1:3306/db?mode=row&mode=forupdate",
	"mysql://u:p@127.0.0.1:3306",
	"mysql://u:p@127.0.0.1:3306/",
	"mysql://u:p@127.0.0.1:3306/db/extra",
	"mysql://u:p@h1:3306,h2:3306/db",
	"mysql://u:p@127.0.0.1:0/db",
	"mysql://u:p@127.0.0.1:99999999/db",
	"mysql:opaque",
}

// harness is the conformance harness shared by both modes.
type harness struct {
	t     *testing.T
	srv   *testserver.MariaDB
	admin *sql.DB
	table string
	mode  mysql.Mode
	query string // URL query for this mode
	// linkQuery is the URL query of the client behind a fault proxy.
	linkQuery string
	lockers   sqltest.Lockers
	fenced    string
}

func newHarness(t *testing.T, mode mysql.Mode) *harness {
	srv := ownServer(t)
	h := &harness{t: t, srv: srv, admin: adminDB(t, srv), mode: mode, table: uniqueTable("conf_" + string(mode))}
	h.query = "mode=" + string(mode) + "&table=" + h.table
	h.linkQuery = h.query
	if mode == mysql.ModeForUpdate {
		// A short wait_timeout (sessionTimeout) lets the server end the
		// session of a holder frozen by the pause-holder check, and of
		// the client behind a fault proxy in the partitioned-holder
		// check; the holder's lease (backend.Deadliner) reports the loss
		// as soon as it is looked at after the resume, before the server
		// can have freed the lock.
		h.query += "&keepalive=500ms&sessionTimeout=3s"
		h.linkQuery = h.query
	}
	h.fenced = testserver.Redis(t, testserver.RedisConfig{}).Addr()
	return h
}

func (h *harness) kill(ctx context.Context, id int64) error {
	_, err := h.admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
	return err
}

// NewLocker: row mode opens by URL (a new pool each time); forupdate uses
// the typed constructor over a new *sql.DB, with a keepalive long enough
// that a lock whose connection Expire killed still looks held to its lease,
// so that the stale-holder check reaches the backend's own check (COMMIT on
// a dead session) instead of finding the lease already ended.
func (h *harness) NewLocker(ctx context.Context) (*distlock.Locker, error) {
	if h.mode == mysql.ModeRow {
		return distlock.Open(ctx, mysqlURL(h.srv, h.query))
	}
	db := openDB(h.t, config(h.t, h.srv))
	return h.lockers.Add(mustNew(h.t, db, mysql.WithMode(mysql.ModeForUpdate), mysql.WithTable(h.table), mysql.WithKeepalive(time.Minute))), nil
}

// NewLinkedLocker opens a client whose connections pass through a fault
// proxy.
func (h *harness) NewLinkedLocker(ctx context.Context) (*distlock.Locker, conformance.Link, error) {
	p, err := netfault.Listen(h.srv.Addr())
	if err != nil {
		return nil, nil, err
	}
	h.t.Cleanup(func() { _ = p.Close() })
	u := mysqlURL(h.srv, h.linkQuery)
	pu := "mysql://" + h.srv.User + ":" + h.srv.Password + "@" + p.Addr() + u[len("mysql://"+h.srv.User+":"+h.srv.Password+"@"+h.srv.Addr()):]
	l, err := distlock.Open(ctx, pu)
	if err != nil {
		return nil, nil, err
	}
	return l, p, nil
}

// Held lists the locks held now, read from the server.
func (h *harness) Held(ctx context.Context) ([]string, error) {
	if h.mode == mysql.ModeRow {
		return queryStrings(ctx, h.admin, "SELECT lock_key FROM `"+h.table+"` WHERE holds > 0 AND expires_at > UTC_TIMESTAMP(6)")
	}
	return lockedRows(ctx, h.admin, h.table)
}

// lockedRows lists the forupdate rows some transaction holds locked: every
// row minus the rows a SKIP LOCKED read can take.
func lockedRows(ctx context.Context, db *sql.DB, table string) ([]string, error) {
	all, err := queryStrings(ctx, db, "SELECT lock_key FROM `"+table+"` WHERE kind = 0")
	if err != nil {
		return nil, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, "SELECT lock_key FROM `"+table+"` WHERE kind = 0 FOR UPDATE SKIP LOCKED")
	if err != nil {
		return nil, err
	}
	free, err := scanStrings(rows)
	if err != nil {
		return nil, err
	}
	var held []string
	for _, k := range all {
		if !slices.Contains(free, k) {
			held = append(held, k)
		}
	}
	return held, nil
}

func queryStrings(ctx context.Context, db *sql.DB, q string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return scanStrings(rows)
}

func scanStrings(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// KillAll is a server fault: KILL CONNECTION of every client session.
func (h *harness) KillAll(ctx context.Context) error {
	conn, err := h.admin.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND USER = ?", h.srv.User)
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		_, _ = conn.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
	}
	return nil
}

func (h *harness) harness() conformance.Harness {
	sh := sqltest.Harness{
		Name:           "mysql-" + string(h.mode),
		Srv:            h.srv,
		URL:            mysqlURL(h.srv, h.query),
		BadURLs:        badURLs,
		UnreachableURL: closedPortURL(h.t),
		FencedRedis:    h.fenced,
		Client:         h,
		KillAllName:    "KILL every client connection",
	}
	if h.mode == mysql.ModeRow {
		sh.ExpireRow = func(ctx context.Context, key string) error { return expireRow(ctx, h.admin, h.table, key) }
		return sh.Conformance()
	}
	// Forupdate: a partitioned client (the linked one) loses its session
	// after its wait_timeout of 3s. Sessions end by KILL CONNECTION.
	sh.SessionTimeout = 3 * time.Second
	sh.PinnedIDs = func(l *distlock.Locker, key string) []int64 {
		if key == "" {
			return mysql.PinnedConnIDs(l)
		}
		if id, ok := mysql.PinnedConnID(l, key); ok {
			return []int64{id}
		}
		return nil
	}
	sh.KillSessions = func(ctx context.Context, ids []int64) error {
		for _, id := range ids {
			if err := h.kill(ctx, id); err != nil {
				return err
			}
		}
		return nil
	}
	sh.Lockers = &h.lockers
	return sh.Conformance()
}

// TestConformanceRow and TestConformanceForUpdate run at once, each on a
// server of its own (their Alone checks one at a time, see
// conformance.Parallel).
func TestConformanceRow(t *testing.T) {
	t.Parallel()
	conformance.Run(t, newHarness(t, mysql.ModeRow).harness())
}

func TestConformanceForUpdate(t *testing.T) {
	t.Parallel()
	conformance.Run(t, newHarness(t, mysql.ModeForUpdate).harness())
}

// expireRow moves a held row's expiry into the past. A row whose holder's
// refresh came too late on a loaded machine has already expired: it is
// moved all the same (the lease is lost either way), not reported unheld.
func expireRow(ctx context.Context, db *sql.DB, table, key string) error {
	h := mysqlKeyHash(key)
	res, err := db.ExecContext(ctx, "UPDATE `"+table+"` SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE key_hash = ? AND holds > 0", h[:])
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("key %q is not held", key)
	}
	return nil
}
