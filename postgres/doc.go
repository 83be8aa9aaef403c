// Package postgres is distlock's PostgreSQL backend, on
// github.com/jackc/pgx/v5. It registers the URL schemes "postgres" and
// "postgresql".
//
//	import _ "github.com/distlock/distlock/postgres"
//
//	l, err := distlock.Open(ctx, "postgres://user:password@host:5432/database?mode=advisory")
//
// New wraps an existing *pgxpool.Pool. A Locker uses one of two modes
// (WithMode); both keep a per-key fencing counter in a table row, and both
// store each lock's WithMetadata for Locker.Inspect.
//
// # Mode "row" (the default): a lease row
//
// A lock is one row of a lease table, keyed by the key's bytes, so any key
// of up to 1,024 bytes names its own row and no SQL text is built from it.
// Acquire is one INSERT … ON CONFLICT statement: it takes a free or expired
// row (a new tenure: fence + 1), nests for the same owner, and otherwise
// changes nothing. Every hold carries its own request id; Release and
// Refresh check owner, fence and that id, so a stale handle never touches
// a later tenure or another hold. Expiry runs on the database clock; the
// client sends only durations. An acquisition whose reply is lost is
// undone in the background. Row mode keeps no session state and is safe
// behind any connection pooler.
//
// Capabilities: Fencing, Reentrant (across Lockers and processes),
// Expiring, Durable; Notify only with WithNotify (LISTEN/NOTIFY). Not
// Fair, not SessionBound.
//
// # Mode "advisory": pg_advisory_lock on a pinned connection
//
// A lock is a session-level advisory lock held by a connection taken out
// of the pool for the lease; the server frees it when that session ends.
// Each key is registered in the advisory table with its own lock id, so
// two keys never share one. The fencing token is advanced in the
// statement that takes the lock and committed at once. A connection whose
// state is unknown is closed, never returned to the pool. A keepalive
// (WithKeepalive, default 1s) ends the lease when the session is gone; a
// holder cut off from the server declares the loss before the server can
// free the lock.
//
// Advisory mode needs a real server session: never use it through a
// transaction-pooling proxy (pgbouncer pool_mode=transaction). The Locker
// refuses, with ErrInvalidOption, a connection whose backend pid differs
// from the one announced at login.
//
// Capabilities: Fencing, Reentrant (within one Locker), Notify,
// SessionBound. Not Expiring (WithTTL is validated and ignored), not
// Durable (a restart ends every lock; the fence survives), not Fair. Each
// held or waiting lock occupies one connection of the pool.
//
// # Both modes
//
// Tokens of a key stay strictly increasing. Row mode's background cleanup
// (WithCleanup) deletes the rows of locks long free and raises floor rows
// where new fences start; a held row is never deleted. The advisory table
// keeps one row per key ever locked. Locker.ForceRelease ends exactly the
// holder it reports; in advisory mode it terminates the holder's session
// and needs the pg_signal_backend role.
//
// Not guaranteed: availability beyond the primary's, and safety across a
// failover to an asynchronous replica. A step of the server's wall clock
// moves row-mode expiries with it.
//
// Tables are created only with WithCreateTable(true); DDL returns the
// statements. A table of an older release is upgraded on first use with
// WithCreateTable, or refused with ErrInvalidOption and the ALTER TABLE
// that upgrades it. Tested on PostgreSQL 15.
//
// URL parameters: mode, table, create_table, notify, keepalive,
// session_timeout, cleanup_interval, cleanup_grace, cleanup_batch,
// pool_max_conns, connect_timeout and a few of libpq's (sslmode …); any
// other is ErrInvalidOption.
//
// (*distlock.Locker).As answers *Mode and **pgxpool.Pool.
//
// The statements, the pooler trap, the loss analysis, the cleanup's proof
// and the schema are in docs/backends/postgres.md.
package postgres
