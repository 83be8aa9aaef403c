package fence_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/stretchr/testify/require"
)

// way is one way of doing the same write; i counts up from 1 across every
// run of a benchmark (a guarded way uses it as its token).
type way struct {
	name  string
	write func(i int64) error
}

// interleave runs the ways of one store in turn, each iteration doing one
// write of each, and reports each way's mean time per write and its ratio
// to the first way (the plain write): the ways share the same moment of a
// noisy machine, so the ratios hold even when the absolute figures drift.
// With more than two ways it also reports ratios to the second (plaintx).
func interleave(b *testing.B, ways ...way) {
	spent := make([]time.Duration, len(ways))
	var i int64
	n := 0
	for b.Loop() {
		i++
		for k, w := range ways {
			start := time.Now()
			if err := w.write(i); err != nil {
				b.Fatalf("%s: %v", w.name, err)
			}
			spent[k] += time.Since(start)
		}
		n++
	}
	for k, w := range ways {
		b.ReportMetric(float64(spent[k].Nanoseconds())/float64(n), w.name+"-ns/write")
		for base := 0; base < k && base < 2; base++ { // ratios to plain, and to plaintx for SQL
			b.ReportMetric(float64(spent[k])/float64(spent[base]), w.name+"/"+ways[base].name)
		}
	}
}

// BenchmarkGuard measures a guarded write against the same plain write on
// each store, interleaved in one loop (see interleave):
//
//	go test -run '^$' -bench BenchmarkGuard -benchtime 2000x ./fence
//
// Each guarded write carries a new, higher token (the worst case: the
// record changes every time). SQL: the write is one UPDATE of one row;
// "plain" is that UPDATE alone (autocommit), "plaintx" the same in BEGIN …
// COMMIT (which the guard needs anyway), "table" and "column" add the guard
// of each shape. Redis: SET vs guarded SET. Files: the same atomic replace
// (temp file, fsync, rename, fsync of the directory) vs Dir.WriteFile.
func BenchmarkGuard(b *testing.B) {
	ctx := context.Background()
	b.Run("postgres-sql", func(b *testing.B) { benchSQL(b, fence.Postgres, pgDB(b), nil) })
	b.Run("postgres-pgx", func(b *testing.B) { benchSQL(b, fence.Postgres, pgDB(b), pgPool(b)) })
	b.Run("mysql", func(b *testing.B) { benchSQL(b, fence.MySQL, mysqlDB(b), nil) })
	b.Run("redis", func(b *testing.B) {
		c := redisClient(b)
		g := fence.NewRedis(c)
		interleave(b,
			way{"plain", func(int64) error { return c.Set(ctx, "k", "v", 0).Err() }},
			way{"guarded", func(i int64) error { return g.Set(ctx, "r", uint64(i), "k2", "v", 0) }},
		)
	})
	b.Run("dir", func(b *testing.B) {
		dir := b.TempDir()
		g, _ := fence.OpenDir(dir)
		data := []byte("value")
		interleave(b,
			way{"plain", func(int64) error {
				f, err := os.CreateTemp(dir, "plain-*")
				if err != nil {
					return err
				}
				_, _ = f.Write(data)
				_ = f.Sync()
				_ = f.Close()
				if err := os.Rename(f.Name(), filepath.Join(dir, "plain")); err != nil {
					return err
				}
				d, err := os.Open(dir)
				if err != nil {
					return err
				}
				_ = d.Sync()
				return d.Close()
			}},
			way{"guarded", func(i int64) error { return g.WriteFile(ctx, "guarded", uint64(i), data, 0o644) }},
		)
	})
}

// benchSQL: with pool set, through pgx; else through database/sql.
func benchSQL(b *testing.B, d fence.Dialect, db *sql.DB, pool *pgxpool.Pool) {
	ctx := context.Background()
	data := sqltest.UniqueTable("bdata")
	mustExec(b, db, "CREATE TABLE "+data+" (id INT PRIMARY KEY, v BIGINT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)")
	mustExec(b, db, "INSERT INTO "+data+" (id, v) VALUES (1, 0), (2, 0), (3, 0), (4, 0)")
	table, err := fence.NewSQLTable(d, sqltest.UniqueTable("btok"))
	require.NoError(b, err)
	mustExec(b, db, table.DDL())
	column, err := fence.NewSQLColumn(d, data, "id", "fence_token")
	require.NoError(b, err)
	// Each way updates its own row, so no way waits for another's lock.
	update := rebind(d, "UPDATE "+data+" SET v = ? WHERE id = ?")

	plain := func(i int64, row int) error { _, err := db.ExecContext(ctx, update, i, row); return err }
	inTx := func(i int64, row int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, update, i, row); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	guarded := func(g *fence.SQL, key any, row int) func(int64) error {
		return func(i int64) error {
			return g.Tx(ctx, db, key, uint64(i), func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, update, i, row)
				return err
			})
		}
	}
	if pool != nil {
		plain = func(i int64, row int) error { _, err := pool.Exec(ctx, update, i, row); return err }
		inTx = func(i int64, row int) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, update, i, row); return err })
		}
		guarded = func(g *fence.SQL, key any, row int) func(int64) error {
			return func(i int64) error {
				return g.TxPgx(ctx, pool, key, uint64(i), func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, update, i, row)
					return err
				})
			}
		}
	}
	interleave(b,
		way{"plain", func(i int64) error { return plain(i, 1) }},
		way{"plaintx", func(i int64) error { return inTx(i, 2) }},
		way{"table", guarded(table, "r", 3)},
		way{"column", guarded(column, 4, 4)},
	)
}
