package mysql

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock/backend"
)

// ErrorCode classifies the client's errors without a server: outages are
// transient, refused credentials are not, statement errors are unknown.
func TestErrorCode(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		err  error
		want backend.Code
	}{
		{&gomysql.MySQLError{Number: erLockWaitTimeout}, backend.CodeTransient},
		{&gomysql.MySQLError{Number: erServerShutdown}, backend.CodeTransient},
		{&gomysql.MySQLError{Number: erTooManyConns}, backend.CodeTransient},
		{&gomysql.MySQLError{Number: erReadOnly}, backend.CodeTransient},
		{fmt.Errorf("create lock table: %w", &gomysql.MySQLError{Number: erConnectionKilled}), backend.CodeTransient},
		{&gomysql.MySQLError{Number: erAccessDenied, Message: "Access denied for user"}, backend.CodeAuth},
		{&gomysql.MySQLError{Number: erBadDB, Message: "Unknown database 'nodb'"}, backend.CodeMisconfigured},
		{&gomysql.MySQLError{Number: erNoSuchTable, Message: "Table 'db.distlock_locks' doesn't exist"}, backend.CodeMisconfigured},
		{&gomysql.MySQLError{Number: erDBAccessDenied}, backend.CodeAuth},
		{&gomysql.MySQLError{Number: 1064}, backend.CodeUnknown}, // syntax
		{driver.ErrBadConn, backend.CodeTransient},
		{gomysql.ErrInvalidConn, backend.CodeTransient},
		{refused, backend.CodeTransient},
		{fmt.Errorf("x: %w", syscall.ECONNRESET), backend.CodeTransient},
		{&net.DNSError{Err: "no such host", Name: "nohost", IsNotFound: true}, backend.CodeUnavailable},
		{gomysql.ErrNoTLS, backend.CodeUnavailable},
		{errors.New("something else"), backend.CodeUnknown},
	} {
		if got := errorCode(c.err); got != c.want {
			t.Errorf("errorCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
