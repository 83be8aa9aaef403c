package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/jmoiron/sqlx/reflectx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/distlock/distlock/mysql"
)

// userSqlx is a *sqlx.DB over db as a user might have set it up: a Mapper
// of its own (json tags, upper-cased names) and Unsafe. Neither may change
// how a Locker reads its rows.
func userSqlx(db *sql.DB) *sqlx.DB {
	x := sqlx.NewDb(db, "mysql")
	x.Mapper = reflectx.NewMapperFunc("json", strings.ToUpper)
	return x.Unsafe()
}

// mustNewSqlx is mysql.NewSqlx for a test: an error fails it.
func mustNewSqlx(t testing.TB, db *sqlx.DB, opts ...mysql.Option) *distlock.Locker {
	t.Helper()
	l, err := mysql.NewSqlx(db, opts...)
	require.NoError(t, err)
	return l
}

// sqlxHarness is the conformance harness of Lockers made by NewSqlx, each
// over its own pool, on the shared server, with the settings and the
// Expire fault of the mode's harness in conformance_test.go. The faults
// that stop the server or need a client behind a proxy are left to that
// harness: NewSqlx shares New's driver.
func sqlxHarness(t *testing.T, mode mysql.Mode) conformance.Harness {
	srv := server(t)
	admin := adminDB(t, srv)
	table := uniqueTable("sqlx_" + string(mode))
	query := "mode=" + string(mode) + "&table=" + table
	opts := []mysql.Option{mysql.WithMode(mode), mysql.WithTable(table)}
	var (
		mu      sync.Mutex
		lockers []*distlock.Locker
	)
	h := conformance.Harness{
		Name: "mysql-sqlx-" + string(mode),
		NewLocker: func(ctx context.Context) (*distlock.Locker, error) {
			l, err := mysql.NewSqlx(userSqlx(openDB(t, config(t, srv))), opts...)
			if err != nil {
				return nil, err
			}
			// Connected and set up (table, floors) before the checks time
			// anything, as a URL-opened Locker is connected by Open: a
			// fresh Locker's first acquisition counts that setup in its
			// validity, and a short TTL can run out in it on a busy host.
			if _, err := l.Inspect(ctx, "sqlx-harness/ready"); err != nil {
				_ = l.Close()
				return nil, err
			}
			mu.Lock()
			lockers = append(lockers, l)
			mu.Unlock()
			return l, nil
		},
		UnreachableURL: closedPortURL(t),
		BadURLs:        badURLs,
		FencedRedis:    testserver.Redis(t, testserver.RedisConfig{}).Addr(),
	}
	if mode == mysql.ModeRow {
		h.URL = mysqlURL(srv, query)
		h.TTL = 500 * time.Millisecond
		h.BadTTLs = []time.Duration{time.Nanosecond, 999 * time.Nanosecond, time.Microsecond, time.Millisecond}
		h.Faults.Expire = func(ctx context.Context, key string) error { return expireRow(ctx, admin, table, key) }
		return h
	}
	// Forupdate: a lock expires when its connection is killed; the long
	// keepalive keeps the holder from noticing before the check calls
	// Release and Refresh (as in conformance_test.go).
	opts = append(opts, mysql.WithKeepalive(time.Minute))
	h.URL = mysqlURL(srv, query+"&keepalive=500ms&session_timeout=3s")
	h.SessionTimeout = 3 * time.Second
	h.Faults.Expire = func(ctx context.Context, key string) error {
		mu.Lock()
		ls := slices.Clone(lockers)
		mu.Unlock()
		for _, l := range ls {
			if id, ok := mysql.PinnedConnID(l, key); ok {
				_, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
				return err
			}
		}
		return fmt.Errorf("key %q is not held", key)
	}
	return h
}

// A NewSqlx Locker runs New's driver; only its reads of rows (Inspect,
// ForceRelease, the holder record, the lock-wait and cleanup reads) go
// through sqlx. Those are reached by the checks that share the backend;
// the Alone ones (server faults, timing verdicts on the lock path) run
// over New's Lockers in TestConformanceRow and TestConformanceForUpdate.
func sqlxChecks(c conformance.Check) bool { return !c.Alone() }

func TestNewSqlxConformanceRow(t *testing.T) {
	t.Parallel()
	conformance.RunMatching(t, sqlxHarness(t, mysql.ModeRow), sqlxChecks)
}

func TestNewSqlxConformanceForUpdate(t *testing.T) {
	t.Parallel()
	conformance.RunMatching(t, sqlxHarness(t, mysql.ModeForUpdate), sqlxChecks)
}

// NewSqlx refuses a nil *sqlx.DB, one without a *sql.DB and every invalid
// option with a one-line error wrapping ErrInvalidOption, before it looks
// at anything else, and never panics.
func TestNewSqlxInvalid(t *testing.T) {
	db := userSqlx(openDB(t, config(t, server(t))))
	for name, c := range map[string]struct {
		db   *sqlx.DB
		opts []mysql.Option
	}{
		"nil db":          {nil, nil},
		"db without pool": {&sqlx.DB{}, nil},
		"mode":            {db, []mysql.Option{mysql.WithMode("bogus")}},
		"table":           {db, []mysql.Option{mysql.WithTable("a;drop table x")}},
		"keepalive":       {db, []mysql.Option{mysql.WithKeepalive(-time.Second)}},
		"cleanup batch":   {db, []mysql.Option{mysql.WithCleanup(time.Minute, time.Minute, 0)}},
		"nil db and mode": {nil, []mysql.Option{mysql.WithMode("bogus")}},
	} {
		l, err := mysql.NewSqlx(c.db, c.opts...)
		assert.Nil(t, l, name)
		if assert.ErrorIs(t, err, distlock.ErrInvalidOption, name) {
			assert.NotContains(t, err.Error(), "\n", name)
		}
	}
}

// As answers **sqlx.DB with the db a Locker was made from by NewSqlx, and
// **sql.DB with its pool; a Locker made by New has no *sqlx.DB.
func TestNewSqlxAs(t *testing.T) {
	db := userSqlx(openDB(t, config(t, server(t))))
	l := mustNewSqlx(t, db, mysql.WithMode(mysql.ModeForUpdate))
	defer l.Close()
	var x *sqlx.DB
	require.True(t, l.As(&x))
	assert.Same(t, db, x)
	var pool *sql.DB
	require.True(t, l.As(&pool))
	assert.Same(t, db.DB, pool)
	assert.Equal(t, mysql.ModeForUpdate, modeOf(l))

	plain := mustNew(t, db.DB)
	defer plain.Close()
	x = nil
	assert.False(t, plain.As(&x))
	assert.Nil(t, x)
}

// A NewSqlx Locker over a db with its own Mapper and Unsafe sends the
// operator calls' statements a New Locker sends, and reads their rows
// right.
func TestNewSqlxAdminCalls(t *testing.T) {
	for _, mode := range []mysql.Mode{mysql.ModeRow, mysql.ModeForUpdate} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := ctxT(t, time.Minute)
			srv := server(t)
			opts := []mysql.Option{mysql.WithMode(mode), mysql.WithCleanup(0, 0, 10)}
			w, wx := &wire{}, &wire{}
			l := mustNew(t, wiredDB(t, srv, w), append(opts, mysql.WithTable(uniqueTable("sqlxplain")))...)
			defer l.Close()
			lx := mustNewSqlx(t, userSqlx(wiredDB(t, srv, wx)), append(opts, mysql.WithTable(uniqueTable("sqlxuser")))...)
			defer lx.Close()
			plain, user := adminCalls(t, ctx, l, w), adminCalls(t, ctx, lx, wx)
			for name, sent := range plain {
				if name == "force held" && mode == mysql.ModeForUpdate {
					continue // polls until the killed connection is gone
				}
				assert.Len(t, user[name], len(sent), name)
			}
		})
	}
}
