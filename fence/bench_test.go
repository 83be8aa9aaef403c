package fence_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/testkit/sqltest"
)

// BenchmarkGuard measures a guarded write next to the same plain write on
// each store, in one run: quote the ratios.
//
//	go test -run '^$' -bench BenchmarkGuard -benchtime 2000x ./fence
//
// Each guarded write carries a new, higher token (the worst case: the
// record changes every time). SQL writes are one UPDATE of one row; "plain"
// is that UPDATE alone (autocommit), "plain-tx" the same in BEGIN … COMMIT
// (what the guard needs anyway), "guarded-table" and "guarded-column" add
// the guard of each shape.
func BenchmarkGuard(b *testing.B) {
	ctx := context.Background()
	b.Run("postgres-sql", func(b *testing.B) { benchSQL(b, fence.Postgres, pgDB(b), nil) })
	b.Run("postgres-pgx", func(b *testing.B) { benchSQL(b, fence.Postgres, pgDB(b), pgPool(b)) })
	b.Run("mysql", func(b *testing.B) { benchSQL(b, fence.MySQL, mysqlDB(b), nil) })
	b.Run("redis", func(b *testing.B) {
		c := redisClient(b)
		g := fence.NewRedis(c)
		b.Run("plain", func(b *testing.B) {
			for b.Loop() {
				if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
		tok := uint64(0) // outside b.Run: -count runs the function again on the same store
		b.Run("guarded", func(b *testing.B) {
			for b.Loop() {
				tok++
				if err := g.Set(ctx, "r", tok, "k", "v", 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("dir", func(b *testing.B) {
		dir := b.TempDir()
		g, _ := fence.OpenDir(dir)
		data := []byte("value")
		b.Run("plain", func(b *testing.B) { // the same atomic replace, unguarded
			for b.Loop() {
				f, err := os.CreateTemp(dir, "plain-*")
				if err != nil {
					b.Fatal(err)
				}
				_, _ = f.Write(data)
				_ = f.Sync()
				_ = f.Close()
				if err := os.Rename(f.Name(), filepath.Join(dir, "plain")); err != nil {
					b.Fatal(err)
				}
				d, _ := os.Open(dir)
				_ = d.Sync()
				_ = d.Close()
			}
		})
		tok := uint64(0)
		b.Run("guarded", func(b *testing.B) {
			for b.Loop() {
				tok++
				if err := g.WriteFile(ctx, "guarded", tok, data, 0o644); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// benchSQL: with pool set, through pgx; else through database/sql.
func benchSQL(b *testing.B, d fence.Dialect, db *sql.DB, pool *pgxpool.Pool) {
	ctx := context.Background()
	data := sqltest.UniqueTable("bdata")
	mustExec(b, db, "CREATE TABLE "+data+" (id INT PRIMARY KEY, v BIGINT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)")
	mustExec(b, db, "INSERT INTO "+data+" (id, v) VALUES (1, 0)")
	table, err := fence.NewSQLTable(d, sqltest.UniqueTable("btok"))
	if err != nil {
		b.Fatal(err)
	}
	mustExec(b, db, table.DDL())
	column, err := fence.NewSQLColumn(d, data, "id", "fence_token")
	if err != nil {
		b.Fatal(err)
	}
	update := rebind(d, "UPDATE "+data+" SET v = ? WHERE id = 1")

	// One write, each way; tx is nil for autocommit.
	var write func(tx any, i int64) error
	var plainTx func(func(tx any) error) error
	var guarded func(g *fence.SQL, key any, tok uint64, fn func(tx any) error) error
	if pool != nil {
		write = func(tx any, i int64) error {
			if tx == nil {
				_, err := pool.Exec(ctx, update, i)
				return err
			}
			_, err := tx.(pgx.Tx).Exec(ctx, update, i)
			return err
		}
		plainTx = func(fn func(any) error) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fn(tx) })
		}
		guarded = func(g *fence.SQL, key any, tok uint64, fn func(any) error) error {
			return g.TxPgx(ctx, pool, key, tok, func(tx pgx.Tx) error { return fn(tx) })
		}
	} else {
		write = func(tx any, i int64) error {
			if tx == nil {
				_, err := db.ExecContext(ctx, update, i)
				return err
			}
			_, err := tx.(*sql.Tx).ExecContext(ctx, update, i)
			return err
		}
		plainTx = func(fn func(any) error) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := fn(tx); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		}
		guarded = func(g *fence.SQL, key any, tok uint64, fn func(any) error) error {
			return g.Tx(ctx, db, key, tok, func(tx *sql.Tx) error { return fn(tx) })
		}
	}
	b.Run("plain", func(b *testing.B) {
		i := int64(0)
		for b.Loop() {
			i++
			if err := write(nil, i); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("plain-tx", func(b *testing.B) {
		i := int64(0)
		for b.Loop() {
			i++
			if err := plainTx(func(tx any) error { return write(tx, i) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct {
		name string
		g    *fence.SQL
		key  any
	}{{"guarded-table", table, "r"}, {"guarded-column", column, 1}} {
		i := int64(0) // the token; outside b.Run: -count runs the function again on the same table
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				i++
				if err := guarded(c.g, c.key, uint64(i), func(tx any) error { return write(tx, i) }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
