package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/fence"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitStale = 3
	exitUsage = 64
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fenced-sql", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", os.Getenv("DATABASE_URL"), "postgres:// URL or MySQL DSN (default $DATABASE_URL)")
	table := fs.String("table", "distlock_fence", "token table, created if missing")
	resource := fs.String("resource", os.Getenv("DISTLOCK_KEY"), "resource name (default $DISTLOCK_KEY)")
	tokenStr := fs.String("token", os.Getenv("DISTLOCK_TOKEN"), "fencing token (default $DISTLOCK_TOKEN)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: fenced-sql [--dsn DSN] [--table T] [--resource R] [--token N] -- SQL [ARG...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() < 1 || *dsn == "" {
		fs.Usage()
		return exitUsage
	}
	token, err := strconv.ParseUint(*tokenStr, 10, 64)
	if err != nil {
		fmt.Fprintf(stderr, "fenced-sql: token %q: want a decimal fencing token (run under distlock run, or pass --token)\n", *tokenStr)
		return exitUsage
	}
	stmt := fs.Arg(0)
	params := make([]any, 0, fs.NArg()-1)
	for _, a := range fs.Args()[1:] {
		params = append(params, a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	err = write(ctx, *dsn, *table, *resource, token, stmt, params)
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "written with token %d\n", token)
		return exitOK
	case errors.Is(err, fence.ErrStale):
		fmt.Fprintf(stderr, "fenced-sql: refused: %v\n", err)
		return exitStale
	case errors.Is(err, fence.ErrZeroToken), errors.Is(err, fence.ErrInvalidResource),
		errors.Is(err, fence.ErrInvalidIdentifier), errors.Is(err, fence.ErrTokenRange):
		fmt.Fprintf(stderr, "fenced-sql: %v\n", err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "fenced-sql: %v\n", err)
		return exitError
	}
}

// write runs stmt with params behind the guard on the database dsn names.
func write(ctx context.Context, dsn, table, resource string, token uint64, stmt string, params []any) error {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		g, err := fence.NewSQLTable(fence.Postgres, table)
		if err != nil {
			return err
		}
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, g.DDL()); err != nil {
			return err
		}
		return g.TxPgx(ctx, conn, resource, token, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, stmt, params...)
			return err
		})
	}
	g, err := fence.NewSQLTable(fence.MySQL, table)
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, g.DDL()); err != nil {
		return err
	}
	return g.Tx(ctx, db, resource, token, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, stmt, params...)
		return err
	})
}
