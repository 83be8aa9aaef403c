package mysql

import (
	"context"
	"database/sql"
	"time"
)

// The session variables that end a silent session, and so a forupdate
// lock's transaction: wait_timeout everywhere; on MariaDB (10.3+) also
// idle_transaction_timeout, idle_readonly_transaction_timeout and
// idle_write_transaction_timeout, which replace wait_timeout while a
// transaction is open — the read-only and write ones (by the server's own
// classification; a locking read counts as read-only on MariaDB 10.11) take
// precedence over the general one, and any of them may be shorter or longer
// than wait_timeout. MySQL has none of the three (its sessions end only by
// wait_timeout) and answers their names with error 1193.
const (
	idleLimitsMariaDB = "SELECT CONNECTION_ID(), @@SESSION.wait_timeout, @@SESSION.idle_transaction_timeout, @@SESSION.idle_readonly_transaction_timeout, @@SESSION.idle_write_transaction_timeout"
	idleLimitsMySQL   = "SELECT CONNECTION_ID(), @@SESSION.wait_timeout"

	erUnknownSystemVariable = 1193

	// maxIdleSeconds caps the idle limit (the documented maximum of
	// wait_timeout and of MariaDB's idle_*transaction_timeout: 31536000
	// s, a year).
	maxIdleSeconds = 365 * 24 * 3600
)

// sessionInfo returns the connection's id and its idle limit: the smallest
// non-zero of the session's limits above, so a silent holder is never
// counted alive past the moment any of them can end its session. Taking the
// smallest is conservative where a larger transaction limit would in fact
// replace wait_timeout: the keepalive then pings more often than needed and
// a cut-off holder gives up its lease earlier than it must, never later.
func (d *fuDriver) sessionInfo(ctx context.Context, conn *sql.Conn) (int64, time.Duration, error) {
	if !d.noIdleTrx.Load() {
		id, idle, err := scanIdle(ctx, conn, idleLimitsMariaDB, 4)
		if mysqlCode(err) != erUnknownSystemVariable {
			return id, idle, err
		}
		d.noIdleTrx.Store(true) // MySQL: ask only for wait_timeout from now on
	}
	return scanIdle(ctx, conn, idleLimitsMySQL, 1)
}

// scanIdle runs q, which selects the connection id and n limits in seconds.
func scanIdle(ctx context.Context, conn *sql.Conn, q string, n int) (int64, time.Duration, error) {
	var id int64
	limits := make([]int64, n)
	dest := []any{&id}
	for i := range limits {
		dest = append(dest, &limits[i])
	}
	err := conn.QueryRowContext(ctx, q).Scan(dest...)
	idle := int64(maxIdleSeconds)
	for _, s := range limits {
		if s > 0 && s < idle {
			idle = s
		}
	}
	return id, time.Duration(idle) * time.Second, err
}
