package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// errorCode is the ErrorCode (backend.ErrorClassifier) of both modes, for
// pgx's errors. By SQLSTATE: class 28 and 42501 are CodeAuth; a missing
// database, schema or table (3D000, 3F000, 42P01) CodeMisconfigured;
// classes 08, 53, 57, 40, 58 and 55P03, 25006 CodeTransient; other server
// errors CodeUnknown. Network errors are CodeTransient; any other error
// that is not a server's answer is CodeUnavailable.
func errorCode(err error) backend.Code {
	if code := pgCode(err); code != "" {
		switch {
		case strings.HasPrefix(code, "28"), code == "42501": // invalid authorization or password; insufficient privilege
			return backend.CodeAuth
		case code == "3D000", code == "3F000", code == "42P01": // missing database, schema, table
			return backend.CodeMisconfigured
		case transientCode(code):
			return backend.CodeTransient
		}
		return backend.CodeUnknown
	}
	if c := sqllock.NetCode(err); c != backend.CodeUnknown {
		return c
	}
	return backend.CodeUnavailable
}

// transientCode reports whether a server error means the server cannot
// serve now, as opposed to a statement or schema error.
func transientCode(code string) bool {
	for _, class := range []string{"08", "53", "57", "40", "58"} {
		if strings.HasPrefix(code, class) {
			return true
		}
	}
	return code == "55P03" || code == "25006"
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// failed is sqllock.Failed with a hint when the lock table is missing.
func failed(ctx context.Context, err error) error {
	return missing(ctx, err, "the lock table is missing: create it with the statement postgres.DDL returns")
}

// permitFailed is sqllock.Failed with a hint when the permit table is
// missing (the permit statements name no other table).
func permitFailed(ctx context.Context, err error) error {
	return missing(ctx, err, "the permit table is missing: create it with the statement under Semaphores in docs/backends/postgres.md")
}

// missing is sqllock.Failed, with hint when a table is missing.
func missing(ctx context.Context, err error, hint string) error {
	err = sqllock.Failed(ctx, err)
	if pgCode(err) == "42P01" {
		return fmt.Errorf("%w (%s, or let the Locker create it with create_table=true / WithCreateTable(true))", err, hint)
	}
	return err
}

// serverRejected reports whether the server answered the statement with an
// error (so an autocommit statement certainly had no effect), or the
// request was certainly never sent.
func serverRejected(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) || pgconn.SafeToRetry(err)
}

// transportFailed reports whether err is a failure of the connection rather
// than an answer of the server, while ctx is still live: the statement may
// be sent again on another connection if it is idempotent.
func transportFailed(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && pgCode(err) == "" && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
