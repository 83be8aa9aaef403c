package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/stretchr/testify/require"
)

// target is one guarded store the scenario tests run against: a value a
// holder sets, and a counter a holder increments (read, add one, write back,
// and log its token) in one guarded write.
type target struct {
	name string
	// set stores v behind the guard.
	set func(ctx context.Context, token uint64, v string) error
	// get reads the value (no guard).
	get func(ctx context.Context) (string, error)
	// incr increments the counter and logs token behind the guard.
	incr func(ctx context.Context, token uint64) error
	// state reads the counter and the logged tokens in write order.
	state func(ctx context.Context) (int64, []uint64, error)
}

// targets builds every guarded store.
func targets(t *testing.T) []target {
	return []target{
		sqlTarget(t, "postgres-table-sql", fence.Postgres, false, false),
		sqlTarget(t, "postgres-column-pgx", fence.Postgres, true, true),
		sqlTarget(t, "postgres-table-pgx", fence.Postgres, false, true),
		sqlTarget(t, "mysql-table", fence.MySQL, false, false),
		sqlTarget(t, "mysql-column", fence.MySQL, true, false),
		redisTarget(t),
		dirTarget(t),
	}
}

// ops runs statements (with ? placeholders) in one transaction.
type ops struct {
	exec func(q string, args ...any) error
	one  func(q string, args ...any) (int64, error)
}

// rebind turns ? placeholders into $n for PostgreSQL.
func rebind(d fence.Dialect, q string) string {
	if d != fence.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func sqlOps(ctx context.Context, d fence.Dialect, tx *sql.Tx) ops {
	return ops{
		exec: func(q string, args ...any) error { _, err := tx.ExecContext(ctx, rebind(d, q), args...); return err },
		one: func(q string, args ...any) (int64, error) {
			var n int64
			err := tx.QueryRowContext(ctx, rebind(d, q), args...).Scan(&n)
			return n, err
		},
	}
}

func pgxOps(ctx context.Context, tx pgx.Tx) ops {
	return ops{
		exec: func(q string, args ...any) error {
			_, err := tx.Exec(ctx, rebind(fence.Postgres, q), args...)
			return err
		},
		one: func(q string, args ...any) (int64, error) {
			var n int64
			err := tx.QueryRow(ctx, rebind(fence.Postgres, q), args...).Scan(&n)
			return n, err
		},
	}
}

// sqlTarget: table data (id, v, n[, fence_token]) with row id 1, table log
// (seq, token); the guard is a token table (resource "res") or the
// fence_token column of row 1 (key 1).
func sqlTarget(t *testing.T, name string, d fence.Dialect, column, usePgx bool) target {
	t.Helper()
	db := dialectDB(t, d)
	data, log := sqltest.UniqueTable("fdata"), sqltest.UniqueTable("flog")
	serial := "BIGSERIAL PRIMARY KEY"
	if d == fence.MySQL {
		serial = "BIGINT AUTO_INCREMENT PRIMARY KEY"
	}
	mustExec(t, db, fmt.Sprintf("CREATE TABLE %s (id INT PRIMARY KEY, v VARCHAR(255) NOT NULL, n BIGINT NOT NULL)", data))
	mustExec(t, db, fmt.Sprintf("INSERT INTO %s (id, v, n) VALUES (1, '', 0)", data))
	mustExec(t, db, fmt.Sprintf("CREATE TABLE %s (seq %s, token BIGINT NOT NULL)", log, serial))
	var (
		g   *fence.SQL
		err error
		key any = "res"
	)
	if column {
		g, err = fence.NewSQLColumn(d, data, "id", "fence_token")
		key = 1
	} else {
		g, err = fence.NewSQLTable(d, sqltest.UniqueTable("ftok"))
	}
	require.NoError(t, err)
	mustExec(t, db, g.DDL())

	run := func(ctx context.Context, token uint64, fn func(ops) error) error {
		return g.Tx(ctx, db, key, token, func(tx *sql.Tx) error { return fn(sqlOps(ctx, d, tx)) })
	}
	if usePgx {
		pool := pgPool(t)
		run = func(ctx context.Context, token uint64, fn func(ops) error) error {
			return g.TxPgx(ctx, pool, key, token, func(tx pgx.Tx) error { return fn(pgxOps(ctx, tx)) })
		}
	}
	return target{
		name: name,
		set: func(ctx context.Context, token uint64, v string) error {
			return run(ctx, token, func(o ops) error { return o.exec("UPDATE "+data+" SET v = ? WHERE id = 1", v) })
		},
		get: func(ctx context.Context) (string, error) {
			var v string
			err := db.QueryRowContext(ctx, "SELECT v FROM "+data+" WHERE id = 1").Scan(&v)
			return v, err
		},
		incr: func(ctx context.Context, token uint64) error {
			return run(ctx, token, func(o ops) error {
				n, err := o.one("SELECT n FROM " + data + " WHERE id = 1")
				if err != nil {
					return err
				}
				if err := o.exec("UPDATE "+data+" SET n = ? WHERE id = 1", n+1); err != nil {
					return err
				}
				return o.exec("INSERT INTO "+log+" (token) VALUES (?)", int64(token))
			})
		},
		state: func(ctx context.Context) (int64, []uint64, error) {
			var n int64
			if err := db.QueryRowContext(ctx, "SELECT n FROM "+data+" WHERE id = 1").Scan(&n); err != nil {
				return 0, nil, err
			}
			rows, err := db.QueryContext(ctx, "SELECT token FROM "+log+" ORDER BY seq")
			if err != nil {
				return 0, nil, err
			}
			defer rows.Close()
			var toks []uint64
			for rows.Next() {
				var tok uint64
				if err := rows.Scan(&tok); err != nil {
					return 0, nil, err
				}
				toks = append(toks, tok)
			}
			return n, toks, rows.Err()
		},
	}
}

func mustExec(t testing.TB, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// incrScript increments KEYS[1] and logs the token (ARGV[1]) to list KEYS[2].
var incrScript = fence.NewScript(`
local n = tonumber(redis.call('GET', KEYS[1]) or '0') + 1
redis.call('SET', KEYS[1], n)
redis.call('RPUSH', KEYS[2], ARGV[1])
return n`)

func redisTarget(t *testing.T) target {
	c := redisClient(t)
	g := fence.NewRedis(c)
	return target{
		name: "redis",
		set: func(ctx context.Context, token uint64, v string) error {
			return g.Set(ctx, "res", token, "data:v", v, 0)
		},
		get: func(ctx context.Context) (string, error) {
			v, err := c.Get(ctx, "data:v").Result()
			if errors.Is(err, goredis.Nil) {
				return "", nil
			}
			return v, err
		},
		incr: func(ctx context.Context, token uint64) error {
			_, err := g.Eval(ctx, "res", token, incrScript, []string{"data:n", "data:log"}, token)
			return err
		},
		state: func(ctx context.Context) (int64, []uint64, error) {
			n, err := c.Get(ctx, "data:n").Int64()
			if err != nil && !errors.Is(err, goredis.Nil) {
				return 0, nil, err
			}
			l, err := c.LRange(ctx, "data:log", 0, -1).Result()
			if err != nil {
				return 0, nil, err
			}
			toks, err := parseTokens(l)
			return n, toks, err
		},
	}
}

func parseTokens(ss []string) ([]uint64, error) {
	var toks []uint64
	for _, s := range ss {
		tok, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, err
		}
		toks = append(toks, tok)
	}
	return toks, nil
}

// dirTarget: file "v" holds the value; file "counter" holds "n tok tok …".
func dirTarget(t *testing.T) target {
	dir := t.TempDir()
	g, err := fence.OpenDir(dir)
	require.NoError(t, err)
	return target{
		name: "dir",
		set: func(ctx context.Context, token uint64, v string) error {
			return g.WriteFile(ctx, "v", token, []byte(v), 0o644)
		},
		get: func(ctx context.Context) (string, error) {
			b, err := os.ReadFile(filepath.Join(dir, "v"))
			if errors.Is(err, os.ErrNotExist) {
				return "", nil
			}
			return string(b), err
		},
		incr: func(ctx context.Context, token uint64) error {
			return g.Update(ctx, "counter", token, 0o644, func(old []byte) ([]byte, error) {
				f := strings.Fields(string(old))
				n := int64(0)
				if len(f) > 0 {
					n, _ = strconv.ParseInt(f[0], 10, 64)
					f = f[1:]
				}
				f = append([]string{strconv.FormatInt(n+1, 10)}, append(f, strconv.FormatUint(token, 10))...)
				return []byte(strings.Join(f, " ")), nil
			})
		},
		state: func(ctx context.Context) (int64, []uint64, error) {
			b, err := os.ReadFile(filepath.Join(dir, "counter"))
			if errors.Is(err, os.ErrNotExist) {
				return 0, nil, nil
			}
			if err != nil {
				return 0, nil, err
			}
			f := strings.Fields(string(b))
			n, _ := strconv.ParseInt(f[0], 10, 64)
			toks, err := parseTokens(f[1:])
			return n, toks, err
		},
	}
}
