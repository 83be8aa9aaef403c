package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

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

// Invalid options of the typed constructor surface as ErrInvalidOption on
// use.
func TestNewInvalidOptions(t *testing.T) {
	srv := server(t)
	db := openDB(t, config(t, srv))
	ctx := ctxT(t, time.Minute)
	for name, opt := range map[string]mysql.Option{
		"table":     mysql.WithTable("x`; DROP TABLE y; --"),
		"mode":      mysql.WithMode("bogus"),
		"keepalive": mysql.WithKeepalive(0),
	} {
		l := mysql.New(db, opt)
		if _, err := l.TryAcquire(ctx, "k"); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: TryAcquire = %v, want ErrInvalidOption", name, err)
		}
		if _, err := l.Inspect(ctx, "k"); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: Inspect = %v, want ErrInvalidOption", name, err)
		}
		_ = l.Close()
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
		l := mysql.New(openDB(t, cfg), mysql.WithMode(mode))
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
		l := mysql.New(db, mysql.WithMode(mode), mysql.WithTable(table), mysql.WithCreateTable(false))
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
		if err != nil || info.Fence != lease.Token() {
			t.Errorf("%s: Inspect = %+v, %v; want fence %d", mode, info, err, lease.Token())
		}
		_ = lease.Release(ctx)
		_ = l.Close()
	}
}

func TestNewNilDB(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	var db *sql.DB
	var xdb *sqlx.DB
	for _, l := range []*mysql.Locker{mysql.New(db), mysql.New(xdb)} {
		if _, err := l.TryAcquire(ctx, "k"); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("nil db: %v, want ErrInvalidOption", err)
		}
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	}
}

// New accepts a *sqlx.DB as well.
func TestNewSQLX(t *testing.T) {
	srv := server(t)
	ctx := ctxT(t, time.Minute)
	x := sqlx.NewDb(openDB(t, config(t, srv)), "mysql")
	for _, mode := range []mysql.Mode{mysql.ModeRow, mysql.ModeForUpdate} {
		l := mysql.New(x, mysql.WithMode(mode), mysql.WithTable(uniqueTable("sqlx")))
		lease, err := l.TryAcquire(ctx, "sqlx")
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		_ = lease.Release(ctx)
		_ = l.Close()
		if err := x.PingContext(ctx); err != nil {
			t.Errorf("%s: Close closed the caller's database: %v", mode, err)
		}
	}
}
