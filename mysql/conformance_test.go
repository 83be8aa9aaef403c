package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/netfault"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/mysql"
)

// restart is the RestartBackend fault: kill -9 and start again on the same
// data directory.
func restart(srv *testserver.MariaDB) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := srv.Kill(); err != nil {
			return err
		}
		return srv.Restart(ctx)
	}
}

// closedPortURL is a mysql URL on a loopback port nobody listens on.
func closedPortURL(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "mysql://u:p@" + addr + "/db"
}

// badURLs are malformed mysql URLs: each must get ErrInvalidOption.
var badURLs = []string{
	"mysql://u:p@127.0.0.1:3306/db?mode=bogus",
	"mysql://u:p@127.0.0.1:3306/db?table=a;drop%20table%20x",
	"mysql://u:p@127.0.0.1:3306/db?table=%60x%60",
	"mysql://u:p@127.0.0.1:3306/db?table=",
	"mysql://u:p@127.0.0.1:3306/db?table=a.b.c",
	"mysql://u:p@127.0.0.1:3306/db?table=x%27%3B--",
	"mysql://u:p@127.0.0.1:3306/db?keepalive=-1s",
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
	mu        sync.Mutex
	locks     []*mysql.Locker
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

// newLocker: row mode opens by URL (a new pool each time); forupdate uses
// the typed constructor over a new *sql.DB, with a keepalive long enough
// that a lock whose connection Expire killed still looks held to its lease,
// so that the stale-holder check reaches the backend's own check (COMMIT on
// a dead session) instead of finding the lease already ended.
func (h *harness) newLocker(ctx context.Context) (distlock.Locker, error) {
	if h.mode == mysql.ModeRow {
		return distlock.Open(ctx, mysqlURL(h.srv, h.query))
	}
	db := openDB(h.t, config(h.t, h.srv))
	l := mustNew(h.t, db, mysql.WithMode(mysql.ModeForUpdate), mysql.WithTable(h.table), mysql.WithKeepalive(time.Minute))
	h.mu.Lock()
	h.locks = append(h.locks, l)
	h.mu.Unlock()
	return l, nil
}

// newLinkedLocker opens a client whose connections pass through a fault
// proxy.
func (h *harness) newLinkedLocker(ctx context.Context) (distlock.Locker, conformance.Link, error) {
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

// held lists the locks held now, read from the server.
func (h *harness) held(ctx context.Context) ([]string, error) {
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

// killAll is a server fault: KILL CONNECTION of every client session.
func (h *harness) killAll(ctx context.Context) (func(context.Context) error, error) {
	conn, err := h.admin.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND USER = ?", h.srv.User)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		_, _ = conn.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
	}
	return func(context.Context) error { return nil }, nil
}

func (h *harness) harness() conformance.Harness {
	srv := h.srv
	ch := conformance.Harness{
		Name:           "mysql-" + string(h.mode),
		NewLocker:      h.newLocker,
		URL:            mysqlURL(srv, h.query),
		FencedRedis:    h.fenced,
		UnreachableURL: closedPortURL(h.t),
		BadURLs:        badURLs,
		Faults: conformance.Faults{
			NewLinkedLocker: h.newLinkedLocker,
			StopBackend:     func(context.Context) error { return srv.Kill() },
			StartBackend:    srv.Restart,
			RestartBackend:  restart(srv),
			Held:            h.held,
			ServerFaults: []conformance.ServerFault{
				{Name: "kill -9 and restart", Inject: func(context.Context) (func(context.Context) error, error) {
					return srv.Restart, srv.Kill()
				}},
				{Name: "SIGSTOP 3s", Inject: func(context.Context) (func(context.Context) error, error) {
					return func(context.Context) error { return srv.Resume() }, srv.Pause()
				}},
				{Name: "KILL every client connection", Inject: h.killAll},
			},
		},
	}
	if h.mode == mysql.ModeRow {
		ch.TTL = 500 * time.Millisecond
		ch.BadTTLs = []time.Duration{time.Nanosecond, 999 * time.Nanosecond, time.Microsecond, time.Millisecond}
		// Expire moves the row's expiry into the past, bypassing the
		// owner check; the holder is not told.
		ch.Faults.Expire = func(ctx context.Context, key string) error { return expireRow(ctx, h.admin, h.table, key) }
		return ch
	}
	// Forupdate: a dead client's connection closes with its process, and
	// the server rolls back at once; a partitioned one (the linked client)
	// loses its session after its wait_timeout of 3s.
	ch.SessionTimeout = 3 * time.Second
	killPinned := func(ctx context.Context, l *mysql.Locker, key string) error {
		ids := mysql.PinnedConnIDs(l)
		if key != "" {
			id, ok := mysql.PinnedConnID(l, key)
			if !ok {
				return fmt.Errorf("key %q is not held", key)
			}
			ids = []int64{id}
		}
		if len(ids) == 0 {
			return fmt.Errorf("the locker holds no lock")
		}
		for _, id := range ids {
			if err := h.kill(ctx, id); err != nil {
				return err
			}
		}
		return nil
	}
	// KillClient: KILL CONNECTION of the victim's pinned connections, from
	// an admin connection.
	ch.Faults.KillClient = func(l distlock.Locker) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return killPinned(ctx, l.(*mysql.Locker), "")
	}
	// Expire: the lock of a forupdate holder can only be dropped by ending
	// its transaction, so KILL its connection; the long keepalive of the
	// harness's lockers keeps the holder from noticing before the check
	// calls Release and Refresh.
	ch.Faults.Expire = func(ctx context.Context, key string) error {
		h.mu.Lock()
		locks := slices.Clone(h.locks)
		h.mu.Unlock()
		for _, l := range locks {
			if _, ok := mysql.PinnedConnID(l, key); ok {
				return killPinned(ctx, l, key)
			}
		}
		return fmt.Errorf("key %q is not held", key)
	}
	return ch
}

func TestConformanceRow(t *testing.T) {
	conformance.Run(t, newHarness(t, mysql.ModeRow).harness())
}

func TestConformanceForUpdate(t *testing.T) {
	conformance.Run(t, newHarness(t, mysql.ModeForUpdate).harness())
}

func expireRow(ctx context.Context, db *sql.DB, table, key string) error {
	h := mysqlKeyHash(key)
	res, err := db.ExecContext(ctx, "UPDATE `"+table+"` SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE key_hash = ? AND holds > 0 AND expires_at > UTC_TIMESTAMP(6)", h[:])
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("key %q is not held", key)
	}
	return nil
}
