// Package mysql is distlock's MySQL and MariaDB backend. It registers the
// URL scheme "mysql".
//
//	import _ "github.com/distlock/distlock/mysql"
//
//	l, err := distlock.Open(ctx, "mysql://user:password@host:3306/database?mode=forupdate")
//
// New wraps an existing *sql.DB. A Locker uses one of two modes
// (WithMode); both keep a per-key fencing counter in an InnoDB row, and
// both store each lock's WithMetadata for Locker.Inspect.
//
// # Mode "row" (the default): a lease row
//
// A lock is one row of a lock table, keyed by the SHA-256 of the key, so
// any key of up to 1,024 bytes names its own row and no SQL text is built
// from it. Acquire is one atomic INSERT … ON DUPLICATE KEY UPDATE: it
// takes a free or expired row (a new tenure: fence + 1), nests for the
// same owner, and otherwise changes nothing. Release and Refresh check
// owner and fence, so a stale handle never touches a later tenure. Expiry
// runs on the database clock; the client sends only durations. An
// acquisition whose reply is lost is undone in the background, hold by
// hold.
//
// Capabilities: Fencing, Reentrant (across Lockers and processes),
// Expiring, Durable. Not Notify (waiters poll, never past the holder's
// remaining time), not Fair, not SessionBound.
//
// # Mode "forupdate": an InnoDB row lock on a pinned connection
//
// A lock is InnoDB's exclusive lock on the key's row, held by an open
// transaction on a connection pinned for the lease. Release is COMMIT. A
// connection whose lock was abandoned is discarded, never returned to the
// pool. The fencing token is advanced and committed on a second connection
// while the lock is held, so a token is durable before anyone sees it and
// never handed out twice. A keepalive (WithKeepalive, default 1s) ends the
// lease within one interval when the connection dies; a holder cut off
// from the server declares the loss before the server's idle limit can
// free the lock.
//
// Capabilities: Fencing, Reentrant (within one Locker), Notify,
// SessionBound. Not Expiring (WithTTL is validated and ignored), not
// Durable (a restart ends every lock; the fence survives), not Fair. Each
// held or waiting lock occupies one connection.
//
// # Both modes
//
// Tokens of a key stay strictly increasing, also across the background
// cleanup (WithCleanup) that deletes the rows of locks long free: deleted
// fences raise one of 1,024 floor rows, where a new row's fence starts.
// A held lock's row is never deleted. Locker.ForceRelease ends exactly the
// tenure it reports; the next token is higher.
//
// Not guaranteed: availability beyond the primary's, and safety across a
// failover to an asynchronous replica. Durability assumes
// innodb_flush_log_at_trx_commit=1. A step of the server's wall clock
// moves row-mode expiries with it. Cleanup assumes REPEATABLE READ; with
// weaker isolation on the table, disable it on every Locker.
//
// Tables are created on first use unless WithCreateTable(false); DDL
// returns the statement. A table of an older release is upgraded on first
// use, or refused with ErrInvalidOption and the ALTER TABLE that upgrades
// it. Keys and owners travel only as parameters; table names are validated
// and quoted. Tested on MariaDB 10.11; the SQL is valid on MySQL 8.0+.
//
// URL parameters: mode, table, create_table, cleanup_interval,
// cleanup_grace, cleanup_batch, keepalive, session_timeout, max_conns,
// timeout and tls.
//
// New takes a *sql.DB, NewSqlx a *sqlx.DB. (*distlock.Locker).As answers
// *Mode, **sql.DB and, for a Locker made by NewSqlx, **sqlx.DB.
//
// The statements, the loss analysis, the cleanup's proof and the schema
// are in docs/backends/mysql.md.
package mysql
