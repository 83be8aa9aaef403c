package postgres

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/distlock/backend"
)

// ErrorCode classifies pgx's errors without a server: SQLSTATE classes of
// outages are transient, refused credentials are not, statement errors are
// unknown, other client failures are unavailable.
func TestErrorCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want backend.Code
	}{
		{&pgconn.PgError{Code: "08006"}, backend.CodeTransient}, // connection failure
		{&pgconn.PgError{Code: "57P01"}, backend.CodeTransient}, // admin shutdown
		{&pgconn.PgError{Code: "57P03"}, backend.CodeTransient}, // cannot connect now
		{&pgconn.PgError{Code: "53300"}, backend.CodeTransient}, // too many connections
		{&pgconn.PgError{Code: "40P01"}, backend.CodeTransient}, // deadlock
		{&pgconn.PgError{Code: "25006"}, backend.CodeTransient}, // read-only: a standby
		{&pgconn.PgError{Code: "28P01"}, backend.CodeAuth},
		{&pgconn.PgError{Code: "3D000"}, backend.CodeMisconfigured},
		{&pgconn.PgError{Code: "42P01"}, backend.CodeMisconfigured},
		{&pgconn.PgError{Code: "28000"}, backend.CodeAuth},
		{&pgconn.PgError{Code: "42601"}, backend.CodeUnknown},
		{fmt.Errorf("create lock table: %w", &pgconn.PgError{Code: "08001"}), backend.CodeTransient},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, backend.CodeTransient},
		{io.ErrUnexpectedEOF, backend.CodeTransient},
		{errors.New("closed pool"), backend.CodeUnavailable},
	} {
		if got := errorCode(c.err); got != c.want {
			t.Errorf("errorCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
