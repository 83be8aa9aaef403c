package fence_test

import (
	"database/sql"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSQLIdentifiers: table and column names are validated, never quoted
// through: anything but a plain identifier (or schema.identifier for the
// table) is ErrInvalidIdentifier, so no name carries SQL.
func TestSQLIdentifiers(t *testing.T) {
	bad := []string{
		"", "1abc", "a-b", "a b", "a;DROP TABLE x", `a"b`, "a`b", "a'b", "a.b.c", ".a", "a.",
		"ab\x00c", "tâble", strings.Repeat("a", 64), "a/*x*/", "a--",
	}
	for _, d := range []fence.Dialect{fence.Postgres, fence.MySQL} {
		for _, name := range bad {
			if _, err := fence.NewSQLTable(d, name); !errors.Is(err, fence.ErrInvalidIdentifier) {
				t.Errorf("%v NewSQLTable(%q): %v, want ErrInvalidIdentifier", d, name, err)
			}
			if _, err := fence.NewSQLColumn(d, "t", name, "tok"); !errors.Is(err, fence.ErrInvalidIdentifier) {
				t.Errorf("%v NewSQLColumn key %q: %v", d, name, err)
			}
			if _, err := fence.NewSQLColumn(d, "t", "id", name); !errors.Is(err, fence.ErrInvalidIdentifier) {
				t.Errorf("%v NewSQLColumn token column %q: %v", d, name, err)
			}
		}
		if _, err := fence.NewSQLColumn(d, "t", "a.b", "tok"); !errors.Is(err, fence.ErrInvalidIdentifier) {
			t.Errorf("%v: a qualified column name: %v", d, err)
		}
		for _, name := range []string{"fence", "public.fence_tokens", "_x$1", strings.Repeat("a", 63)} {
			if _, err := fence.NewSQLTable(d, name); err != nil {
				t.Errorf("%v NewSQLTable(%q): %v", d, name, err)
			}
		}
	}
	if _, err := fence.NewSQLTable(fence.Dialect(9), "t"); !errors.Is(err, fence.ErrDialect) {
		t.Errorf("unknown dialect: %v", err)
	}
	g, _ := fence.NewSQLTable(fence.MySQL, "t")
	assert.ErrorIs(t, g.TxPgx(ctxT(t), nil, "r", 1, nil), fence.ErrDialect, "pgx on a MySQL guard")
	var zero *fence.SQL
	assert.ErrorIs(t, zero.Check(ctxT(t), nil, "r", 1), fence.ErrDialect, "nil guard")
}

// TestSQLArguments: resource names and tokens are checked before the
// database is touched (db is nil here: reaching it would panic).
func TestSQLArguments(t *testing.T) {
	ctx := ctxT(t)
	table, _ := fence.NewSQLTable(fence.Postgres, "t")
	column, _ := fence.NewSQLColumn(fence.Postgres, "t", "id", "tok")
	cases := []struct {
		g     *fence.SQL
		key   any
		token uint64
		want  error
	}{
		{table, "r", 0, fence.ErrZeroToken},
		{table, "r", math.MaxInt64 + 1, fence.ErrTokenRange},
		{table, "", 1, fence.ErrInvalidResource},
		{table, strings.Repeat("x", 1025), 1, fence.ErrInvalidResource},
		{table, "a\xffb", 1, fence.ErrInvalidResource},
		{table, 7, 1, fence.ErrInvalidResource},
		{column, nil, 1, fence.ErrInvalidResource},
		{column, 7, 0, fence.ErrZeroToken},
	}
	for _, c := range cases {
		err := c.g.Tx(ctx, nil, c.key, c.token, func(*sql.Tx) error { return nil })
		if !errors.Is(err, c.want) {
			t.Errorf("key %.20v token %d: %v, want %v", c.key, c.token, err, c.want)
		}
	}
}

// TestSQLInjectionSafeResource: resource names and row keys travel as
// parameters: a hostile one is just a name.
func TestSQLInjectionSafeResource(t *testing.T) {
	for _, d := range []fence.Dialect{fence.Postgres, fence.MySQL} {
		t.Run(d.String(), func(t *testing.T) {
			ctx := ctxT(t)
			db, g := tokenTable(t, d)
			evil := `x'); DROP TABLE ` + "`x`" + `; -- "y" \`
			for _, tok := range []uint64{5, 4} {
				err := g.Tx(ctx, db, evil, tok, func(*sql.Tx) error { return nil })
				if tok == 5 && err != nil || tok == 4 && !errors.Is(err, fence.ErrStale) {
					t.Fatalf("token %d: %v", tok, err)
				}
			}
		})
	}
}

// TestSQLColumnNoRow: the token-column guard does not create rows.
func TestSQLColumnNoRow(t *testing.T) {
	for _, d := range []fence.Dialect{fence.Postgres, fence.MySQL} {
		t.Run(d.String(), func(t *testing.T) {
			db := dialectDB(t, d)
			data := sqltest.UniqueTable("fdata")
			mustExec(t, db, "CREATE TABLE "+data+" (id INT PRIMARY KEY)")
			g, err := fence.NewSQLColumn(d, data, "id", "fence_token")
			require.NoError(t, err)
			mustExec(t, db, g.DDL())
			called := false
			err = g.Tx(ctxT(t), db, 42, 1, func(*sql.Tx) error { called = true; return nil })
			if !errors.Is(err, fence.ErrNoRow) || called {
				t.Fatalf("missing row: %v (write called %t), want ErrNoRow", err, called)
			}
		})
	}
}

// TestSQLWriteErrorRollsBack: when the write fails, the token is not
// recorded either: a lower token still writes afterwards.
func TestSQLWriteErrorRollsBack(t *testing.T) {
	for _, d := range []fence.Dialect{fence.Postgres, fence.MySQL} {
		t.Run(d.String(), func(t *testing.T) {
			ctx := ctxT(t)
			db, g := tokenTable(t, d)
			boom := errors.New("boom")
			require.ErrorIs(t, g.Tx(ctx, db, "r", 10, func(*sql.Tx) error { return boom }), boom, "failing write")
			require.NoError(t, g.Tx(ctx, db, "r", 5, func(*sql.Tx) error { return nil }), "token 5 after token 10's write failed")
		})
	}
}

// TestSQLInFlightNewerWrite: a newer write that has passed the guard but
// not committed yet makes an older one wait, then refuses it: the check
// sees the latest committed token, not a snapshot from before.
func TestSQLInFlightNewerWrite(t *testing.T) {
	for _, d := range []fence.Dialect{fence.Postgres, fence.MySQL} {
		t.Run(d.String(), func(t *testing.T) {
			ctx := ctxT(t)
			db, g := tokenTable(t, d)
			require.NoError(t, g.Tx(ctx, db, "r", 1, func(*sql.Tx) error { return nil }))
			newer, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, g.Check(ctx, newer, "r", 3))
			older := make(chan error, 1)
			go func() { older <- g.Tx(ctx, db, "r", 2, func(*sql.Tx) error { return nil }) }()
			// Whether older has reached the row lock yet or not, it must
			// end refused once newer commits.
			require.NoError(t, newer.Commit())
			require.ErrorIs(t, <-older, fence.ErrStale, "token 2 during token 3's transaction")
		})
	}
}

// TestDirNames: Dir installs plain names only, never its own files.
func TestDirNames(t *testing.T) {
	ctx := ctxT(t)
	d, err := fence.OpenDir(t.TempDir())
	require.NoError(t, err)
	for _, name := range []string{"", ".", "..", "a/b", "../x", ".distlock-fence", ".distlock-fence.lock", "a\x00"} {
		assert.ErrorIs(t, d.WriteFile(ctx, name, 1, nil, 0o644), fence.ErrInvalidResource, "name %q", name)
	}
	if _, err := fence.OpenDir(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("OpenDir of a missing directory: nil error")
	}
}

// TestDirInstall: a tool's output file is installed under the fence; a
// stale install removes it and leaves the installed file alone.
func TestDirInstall(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	d, _ := fence.OpenDir(dir)
	src := filepath.Join(dir, "build.tmp")
	must(t, os.WriteFile(src, []byte("new"), 0o644))
	must(t, d.Install(ctx, 7, src, "out"))
	must(t, os.WriteFile(src, []byte("old"), 0o644))
	require.ErrorIs(t, d.Install(ctx, 6, src, "out"), fence.ErrStale, "install with token 6 after 7")
	if _, err := os.Stat(src); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale source left behind: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out")); string(b) != "new" {
		t.Errorf("out = %q", b)
	}
	if h, err := d.Highest(); err != nil || h != 7 {
		t.Errorf("Highest %d, %v", h, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".distlock-fence-tmp-*"))
	assert.Len(t, left, 0, "temporary files left")
}

func must(t testing.TB, err error) {
	t.Helper()
	require.NoError(t, err)
}

// dialectDB is a database/sql pool on the shared server of d.
func dialectDB(t *testing.T, d fence.Dialect) *sql.DB {
	if d == fence.MySQL {
		return mysqlDB(t)
	}
	return pgDB(t)
}

// tokenTable is a fresh token-table guard on the shared server of d.
func tokenTable(t *testing.T, d fence.Dialect) (*sql.DB, *fence.SQL) {
	db := dialectDB(t, d)
	g, err := fence.NewSQLTable(d, sqltest.UniqueTable("ftok"))
	require.NoError(t, err)
	mustExec(t, db, g.DDL())
	return db, g
}
