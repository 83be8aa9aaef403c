package mysql

import (
	"database/sql/driver"
	"errors"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// MySQL and MariaDB error numbers the backend acts on.
const (
	erLockWaitTimeout   = 1205 // also MariaDB's NOWAIT failure
	erLockDeadlock      = 1213
	erQueryInterrupted  = 1317
	erLockNowait        = 3572 // MySQL 8's NOWAIT failure
	erConnectionKilled  = 1927 // MariaDB
	erServerShutdown    = 1053
	erTooManyConns      = 1040
	erUserTooManyConns  = 1203
	erReadOnly          = 1290 // --read-only, e.g. a replica after failover
	erReadOnlyTrx       = 1792
	erInnoReadOnly      = 1836
	erNetReadError      = 1158
	erNetReadInterrupt  = 1159
	erNetErrorOnWrite   = 1160
	erNetWriteInterrupt = 1161
	erClientDisconnect  = 4031 // MySQL 8: disconnected by the server (idle)
	erMaxStatementTime  = 1969 // MariaDB max_statement_time
	erMaxExecutionTime  = 3024 // MySQL max_execution_time
	erDBAccessDenied    = 1044
	erAccessDenied      = 1045
	erAccessDeniedNoPw  = 1698
	erHostNotPrivileged = 1130
	erHostBlocked       = 1129
	erPasswordExpired   = 1820
	erMustChangePw      = 1862
	erBadDB             = 1049 // unknown database
	erNoSuchTable       = 1146
	erTableAccessDenied = 1142 // command denied to user on a table
	erColAccessDenied   = 1143
	erSpecificAccess    = 1227 // needs a privilege such as SUPER
)

// transientNumbers are the server's answers that waiting may cure: lock
// conflicts, interruptions, a server shutting down, out of connections,
// read-only (a replica during a failover), network errors on its side.
var transientNumbers = map[uint16]bool{
	erLockWaitTimeout: true, erLockDeadlock: true, erQueryInterrupted: true, erLockNowait: true,
	erConnectionKilled: true, erServerShutdown: true, erTooManyConns: true, erUserTooManyConns: true,
	erReadOnly: true, erReadOnlyTrx: true, erInnoReadOnly: true, erNetReadError: true,
	erNetReadInterrupt: true, erNetErrorOnWrite: true, erNetWriteInterrupt: true,
	erClientDisconnect: true, erMaxStatementTime: true, erMaxExecutionTime: true,
}

// refusedNumbers are the server's refusals of the login or of a statement
// that waiting will not cure (CodeAuth): credentials, privileges, a
// blocked host, an expired password.
var refusedNumbers = map[uint16]bool{
	erDBAccessDenied: true, erAccessDenied: true, erAccessDeniedNoPw: true, erHostNotPrivileged: true,
	erHostBlocked: true, erPasswordExpired: true, erMustChangePw: true,
	erTableAccessDenied: true, erColAccessDenied: true, erSpecificAccess: true,
}

// errorCode is the ErrorCode (backend.ErrorClassifier) of both modes, for
// the errors of go-sql-driver/mysql and database/sql: the server's error
// numbers in transientNumbers, the driver's broken-connection errors
// (ErrInvalidConn, ErrBadConn, a packet out of sync or malformed, a busy
// buffer) and network errors (refused, reset, timed out, closed:
// "connection refused", "i/o timeout") are CodeTransient; refused
// credentials and privileges ("Access denied", refusedNumbers) are
// CodeAuth; an unknown database or a missing lock table is
// CodeMisconfigured; the driver's TLS and authentication-plugin refusals
// are CodeUnavailable; anything else (a syntax error) is CodeUnknown.
func errorCode(err error) backend.Code {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch {
		case transientNumbers[me.Number]:
			return backend.CodeTransient
		case refusedNumbers[me.Number]:
			return backend.CodeAuth
		case me.Number == erBadDB || me.Number == erNoSuchTable:
			return backend.CodeMisconfigured
		}
		return backend.CodeUnknown
	}
	switch {
	case errors.Is(err, gomysql.ErrInvalidConn), errors.Is(err, driver.ErrBadConn), errors.Is(err, gomysql.ErrPktSync),
		errors.Is(err, gomysql.ErrPktSyncMul), errors.Is(err, gomysql.ErrBusyBuffer), errors.Is(err, gomysql.ErrMalformPkt):
		return backend.CodeTransient
	case errors.Is(err, gomysql.ErrNoTLS), errors.Is(err, gomysql.ErrCleartextPassword), errors.Is(err, gomysql.ErrNativePassword),
		errors.Is(err, gomysql.ErrOldPassword), errors.Is(err, gomysql.ErrUnknownPlugin):
		return backend.CodeUnavailable
	}
	return sqllock.NetCode(err)
}

func mysqlCode(err error) uint16 {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

func isLockBusy(err error) bool {
	c := mysqlCode(err)
	return c == erLockWaitTimeout || c == erLockNowait
}

// serverRejected reports whether the server answered the statement with an
// error, so it certainly had no effect.
func serverRejected(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) || errors.Is(err, driver.ErrBadConn)
}
