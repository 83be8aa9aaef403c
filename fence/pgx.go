package fence

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PgxBeginner starts pgx transactions: *pgx.Conn, *pgxpool.Pool and pgx.Tx
// (a nested transaction, a savepoint) all do.
type PgxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// CheckPgx is Check for a pgx transaction (Postgres guards only).
func (g *SQL) CheckPgx(ctx context.Context, tx pgx.Tx, key any, token uint64) error {
	if err := g.pgxOnly(); err != nil {
		return err
	}
	return g.check(ctx, key, token, querier{
		exec: func(ctx context.Context, query string, args ...any) error {
			_, err := tx.Exec(ctx, query, args...)
			return err
		},
		one: func(ctx context.Context, query string, args ...any) (int64, bool, error) {
			var v int64
			err := tx.QueryRow(ctx, query, args...).Scan(&v)
			if errors.Is(err, pgx.ErrNoRows) {
				return 0, false, nil
			}
			return v, err == nil, err
		},
	})
}

// TxPgx is Tx for pgx (Postgres guards only): write runs in a transaction
// begun on db, after the guard, and commits with the token or not at all.
func (g *SQL) TxPgx(ctx context.Context, db PgxBeginner, key any, token uint64, write func(pgx.Tx) error) error {
	if err := g.pgxOnly(); err != nil {
		return err
	}
	if err := g.checkArgs(key, token); err != nil {
		return err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("fence: begin: %w", err)
	}
	if err := g.CheckPgx(ctx, tx, key, token); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if err := write(tx); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("fence: commit: %w", err)
	}
	return nil
}

func (g *SQL) pgxOnly() error {
	if g != nil && g.dialect != Postgres {
		return fmt.Errorf("%w: pgx needs a Postgres guard, this one is %v", ErrDialect, g.dialect)
	}
	return nil
}
