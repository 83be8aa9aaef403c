package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/mysql"
)

func TestOpenURL(t *testing.T) {
	srv := server(t)
	ctx := ctxT(t, time.Minute)
	for _, c := range []struct {
		query string
		caps  distlock.Capabilities
	}{
		{"", distlock.Capabilities{Fencing: true, Reentrant: true, Expiring: true, Durable: true}},
		{"mode=row&table=" + uniqueTable("url_row") + "&createTable=true&maxConns=3&timeout=2s", distlock.Capabilities{Fencing: true, Reentrant: true, Expiring: true, Durable: true}},
		{"mode=forupdate&table=" + uniqueTable("url_fu") + "&keepalive=250ms&sessionTimeout=10s", distlock.Capabilities{Fencing: true, Reentrant: true, Notify: true, SessionBound: true}},
	} {
		l, err := distlock.Open(ctx, mysqlURL(srv, c.query))
		if err != nil {
			t.Fatalf("Open(%q): %v", c.query, err)
		}
		if got := l.Capabilities(); got != c.caps {
			t.Errorf("Open(%q): capabilities %+v, want %+v", c.query, got, c.caps)
		}
		lease, err := l.TryAcquire(ctx, "url")
		if err != nil {
			t.Fatalf("Open(%q): TryAcquire: %v", c.query, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

// Malformed URLs and table names get ErrInvalidOption, never a panic and
// never SQL.
func TestBadURLs(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	for _, u := range badURLs {
		l, err := distlock.Open(ctx, u)
		if err == nil {
			_ = l.Close()
			t.Errorf("Open(%q) succeeded", u)
			continue
		}
		if !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("Open(%q) = %v, want ErrInvalidOption", u, err)
		}
	}
	// The password never shows in the error.
	_, err := distlock.Open(ctx, "mysql://user:s3cret@127.0.0.1:3306/db?mode=bogus")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %v leaks the password", err)
	}
}

func TestTableNames(t *testing.T) {
	for _, bad := range []string{"a`b", "a b", "a;b", "a'b", "a.b.c", ".a", "a.", strings.Repeat("x", 65), "ä", "a\x00"} {
		if _, err := mysql.DDL(mysql.ModeRow, bad); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("DDL(%q) = %v, want ErrInvalidOption", bad, err)
		}
	}
	for _, good := range []string{"locks", "db.locks", "Locks_2$", strings.Repeat("x", 64)} {
		if _, err := mysql.DDL(mysql.ModeForUpdate, good); err != nil {
			t.Errorf("DDL(%q) = %v", good, err)
		}
	}
	if _, err := mysql.DDL("bogus", ""); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("DDL with a bad mode = %v", err)
	}
}

// unusedDB is a pool that is never dialled (port 1): for tests that need
// no server.
func unusedDB(t testing.TB) *sql.DB {
	t.Helper()
	cfg := gomysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", "127.0.0.1:1", "db"
	return openDB(t, cfg)
}

// Invalid options of the typed constructor fail New with ErrInvalidOption,
// on one line naming the option and its value; nothing panics, no server
// is needed.
func TestNewInvalidOptions(t *testing.T) {
	db := unusedDB(t)
	for _, c := range []struct {
		opt  mysql.Option
		want string
	}{
		{mysql.WithTable("x`; DROP TABLE y; --"), "WithTable(\"x`; DROP TABLE y; --\")"},
		{mysql.WithTable(""), "WithTable(\"\")"},
		{mysql.WithTable("a.b.c"), "WithTable(\"a.b.c\")"},
		{mysql.WithMode("bogus"), "WithMode(\"bogus\")"},
		{mysql.WithKeepalive(0), "WithKeepalive(0s)"},
		{mysql.WithKeepalive(-time.Second), "WithKeepalive(-1s)"},
	} {
		l, err := mysql.New(db, c.opt)
		if !errors.Is(err, distlock.ErrInvalidOption) || l != nil {
			t.Errorf("%s: New = %v, %v; want ErrInvalidOption", c.want, l, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "mysql: "+c.want) || strings.Contains(msg, "\n") {
			t.Errorf("error %q does not name mysql: %s on one line", msg, c.want)
		}
	}
	// Valid options need no server either.
	l, err := mysql.New(db, nil, mysql.WithMode(mysql.ModeForUpdate), mysql.WithTable("db.t$1"), mysql.WithKeepalive(time.Millisecond), mysql.WithCreateTable(false))
	if err != nil {
		t.Fatal(err)
	}
	if modeOf(l) != mysql.ModeForUpdate {
		t.Errorf("Mode() = %q", modeOf(l))
	}
	if err := l.Close(); err != nil {
		t.Error(err)
	}
}

// An unreachable server gives ErrUnavailable within ctx: a closed port at
// once, a server that never answers when ctx ends.
func TestUnreachable(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	start := time.Now()
	_, err := distlock.Open(ctx, closedPortURL(t))
	if !errors.Is(err, distlock.ErrUnavailable) || time.Since(start) > 2*time.Second {
		t.Errorf("closed port: %v after %v, want ErrUnavailable at once", err, time.Since(start))
	}

	// A listener that accepts and never speaks.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	u := "mysql://u:p@" + ln.Addr().String() + "/db"
	octx, cancel := context.WithTimeout(ctx, time.Second)
	start = time.Now()
	_, err = distlock.Open(octx, u)
	cancel()
	if !errors.Is(err, distlock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("silent server: %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("silent server: Open returned after %v, want within its 1s ctx", d)
	}

	// The typed constructor over a pool that cannot connect.
	cfg := config(t, server(t))
	cfg.Addr = closedPortURL(t)[len("mysql://u:p@"):strings.LastIndex(closedPortURL(t), "/")]
	for _, mode := range []mysql.Mode{mysql.ModeRow, mysql.ModeForUpdate} {
		l := mustNew(t, openDB(t, cfg), mysql.WithMode(mode))
		for _, op := range []string{"TryAcquire", "Acquire"} {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			start := time.Now()
			if op == "Acquire" {
				_, err = l.Acquire(actx, "k")
			} else {
				_, err = l.TryAcquire(actx, "k")
			}
			cancel()
			if !errors.Is(err, distlock.ErrUnavailable) || time.Since(start) > 3*time.Second {
				t.Errorf("%s %s on a closed port: %v after %v, want ErrUnavailable within ctx", mode, op, err, time.Since(start))
			}
		}
		_ = l.Close()
	}
}

// With WithCreateTable(false) the schema is the user's: a missing table is
// an error (not ErrUnavailable), the documented DDL makes it work.
func TestManagedSchema(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	db := openDB(t, config(t, srv))
	ctx := ctxT(t, time.Minute)
	for _, mode := range []mysql.Mode{mysql.ModeRow, mysql.ModeForUpdate} {
		table := uniqueTable("managed")
		l := mustNew(t, db, mysql.WithMode(mode), mysql.WithTable(table), mysql.WithCreateTable(false))
		_, err := l.TryAcquire(ctx, "k")
		if err == nil || errors.Is(err, distlock.ErrUnavailable) || errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("%s without the table: %v, want a schema error", mode, err)
		}
		ddl, err := mysql.DDL(mode, table)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.ExecContext(ctx, ddl); err != nil {
			t.Fatalf("%s DDL: %v\n%s", mode, err, ddl)
		}
		lease, err := l.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatalf("%s with the table: %v", mode, err)
		}
		info, err := l.Inspect(ctx, "k")
		if err != nil || info.Token != lease.Token() {
			t.Errorf("%s: Inspect = %+v, %v; want fence %d", mode, info, err, lease.Token())
		}
		_ = lease.Release(ctx)
		_ = l.Close()
	}
}

func TestNewNilDB(t *testing.T) {
	l, err := mysql.New(nil)
	if !errors.Is(err, distlock.ErrInvalidOption) || l != nil {
		t.Errorf("nil db: %v, %v; want ErrInvalidOption", l, err)
	}
}

// Close of a Locker made with New leaves the caller's database open (a
// *sqlx.DB user passes its DB field: the same *sql.DB).
func TestNewLeavesDBOpen(t *testing.T) {
	srv := server(t)
	ctx := ctxT(t, time.Minute)
	db := openDB(t, config(t, srv))
	for _, mode := range []mysql.Mode{mysql.ModeRow, mysql.ModeForUpdate} {
		l := mustNew(t, db, mysql.WithMode(mode), mysql.WithTable(uniqueTable("own")))
		lease, err := l.TryAcquire(ctx, "own")
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		_ = lease.Release(ctx)
		_ = l.Close()
		if err := db.PingContext(ctx); err != nil {
			t.Errorf("%s: Close closed the caller's database: %v", mode, err)
		}
	}
}
