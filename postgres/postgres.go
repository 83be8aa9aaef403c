// Package postgres is distlock's PostgreSQL backend, registered as
// "postgres://" and "postgresql://". It offers the two locks PostgreSQL
// makes possible: a lease row (mode "row", the default) and a session-level
// advisory lock on a connection pinned to the lease (mode "advisory"). One
// Locker uses one mode; both keep a per-key fencing counter in a table row.
// The driver is github.com/jackc/pgx/v5; New takes a *pgxpool.Pool.
//
// # The pgbouncer trap: advisory mode needs a real session
//
// An advisory lock belongs to a server session (backend process). Behind a
// transaction-pooling proxy (pgbouncer pool_mode=transaction, and most
// "serverless" poolers) consecutive statements of one client connection run
// in different server sessions: the lock is taken in a session that is then
// handed to another client, and the unlock runs elsewhere. Never use
// advisory mode through such a proxy. The driver detects what it can: at
// acquire it compares the backend pid the server announced at login with
// pg_backend_pid() (a proxy announces its own), and refuses with
// ErrInvalidOption when they differ — so a session-pooling proxy is refused
// too; and the keepalive checks that every pinned connection still talks to
// the session that took the lock, declaring the lock lost otherwise. Row
// mode runs each operation as one autocommit statement and keeps no session
// state: it is safe behind any pooler.
//
// # Mode "row" (the default): a lease row
//
// A lock is one row of a lease table (DDL below; created on first use only
// with WithCreateTable(true), URL parameter create_table=true). The primary
// key is the key's bytes (bytea), so any key of up to 1,024 bytes — SQL
// text, quotes, NUL, any script — names its own row, and no SQL text is
// built from it.
//
// Acquire is one statement: INSERT … ON CONFLICT (lock_key) DO UPDATE …
// WHERE the row is expired OR held by the same owner … RETURNING fence,
// wrapped in a CTE that reads the holder's remaining time when the upsert
// changed nothing (the busy reply carries it, so waiters never poll past
// it). The row is taken when free or expired (a new tenure: fence+1), nests
// when held by the same owner (same fence, expiry never shortened), and is
// otherwise left alone. Expiry runs on the database clock: the statement
// reads clock_timestamp() once (the inserted row's expiry less the TTL) and
// every condition uses that instant; the client sends durations (whole
// microseconds, rounded up), never times.
//
// Every hold carries a random request id, kept in the row's holds array
// (one element per live hold). Release removes the caller's own id and frees
// the row when none is left; Refresh requires it; both also check owner and
// fence, so a stale handle never touches a later tenure or another hold. An
// acquire whose reply is lost (ctx ended or the connection broke after the
// statement may have run) is undone in the background by removing exactly
// that request id — never another nested hold of the same owner — repeated
// on a schedule (0, 250ms, 1s, 2s, 4s, bounded by the TTL) in case the
// request is still in flight. Automatic refreshes found due together are
// refreshed in one UPDATE … FROM unnest(…) statement (backend.BatchRefresher)
// that returns which of them it extended; the others are refreshed one by one
// for their exact outcome.
//
// Capabilities: Fencing, Reentrant (owner and holds in the row, across
// Lockers and processes), Expiring, Durable (committed rows survive a crash
// with the default fsync=on and synchronous_commit=on), and Notify only with
// WithNotify (URL notify=true): a release that frees a row then also runs
// pg_notify on a channel named after the table, and each Locker LISTENs on
// one connection of its own and wakes the key's waiters (see notify.go for
// the rules while the listener is down). Measured on one 2-core machine
// (BenchmarkHandoff, 8 waiters on one key over loopback), notifications did
// not pay: handoff p50 722µs with them against 383µs polling, as every
// waiter wakes on every release; they pay when the holder's remaining time
// is long and releases are early. Off by default. Not claimed: Fair,
// SessionBound; Notify without WithNotify (waiters poll, never sleeping past
// the holder's remaining time, which the busy reply carries). A step of the database server's wall clock moves every
// expiry with it; keep it slewed, not stepped.
//
// # Mode "advisory": pg_advisory_lock on a pinned connection
//
// A lock is the session-level advisory lock pg_advisory_lock(bigint) held by
// a connection taken out of the pool for the lease; the server frees it when
// that session ends (connection closed, backend killed, server restart).
// Lock ids: the bigint is the first 8 bytes of SHA-256(namespace, 0, key),
// namespace being the table name. Collisions between distlock keys are
// avoided, not just improbable: each key is registered in the advisory table
// (lock_id primary key, lock_key unique); a key whose hash is already taken
// by another key probes the next candidate (SHA-256 with a counter), and the
// row it claims is its id for good (advisory rows are never deleted), so every
// client maps a key to the same id and two keys never share one. The
// mapping is cached per Locker. Advisory ids of other applications on the
// same database are outside this table: pick a distinct namespace (table)
// if you share the database with code that uses pg_advisory_lock(bigint).
//
// TryAcquire runs pg_try_advisory_lock; Acquire waits inside the server in
// pg_advisory_lock, woken by the server when the lock is freed (Notify).
// When Acquire's ctx ends, the waiting statement is cancelled with the
// protocol's cancel request (pgconn.CancelRequest) and the connection is
// closed, never returned to the pool: its state is unknown (the lock may
// have been granted just before the cancel). Every failure on a pinned
// connection closes it the same way, and a released lock's connection goes
// back to the pool only after pg_advisory_unlock answered true and
// pg_advisory_unlock_all ran, so a pooled connection never holds an
// advisory lock.
//
// The fencing token is the key's counter in the advisory table, advanced in
// the same statement that takes the lock (a data-modifying CTE that runs
// only when the lock was granted) and committed at once: a token is
// durable before anyone sees it, and strictly increasing across sessions,
// kills and restarts.
//
// Reentrancy is by owner id in the client: the server's advisory locks
// stack per session (a session may take the same lock twice and must unlock
// it twice), which is not distlock's owner model. One owner's holds of one
// key in one Locker share one pinned connection that holds the server lock
// once; the last Release unlocks it. Another Locker using the same owner id
// contends like any other owner. A nested acquisition is granted only after
// a command on that pinned session succeeds and the key's record still
// names its session and token: a session the server ended unnoticed (a
// ForceRelease, pg_terminate_backend, a restart) ends the owner's leases
// with ErrLockLost, and the acquisition goes to the server as a new one —
// ErrNotAcquired from TryAcquire while another owner holds the lock.
//
// Loss: a keepalive (WithKeepalive, default 1s) runs SELECT pg_backend_pid()
// on every pinned connection; a failure, or another backend pid, ends the
// lease (Done closes with ErrLockLost). The server ends a silent session on
// its own after idle_session_timeout (PostgreSQL 14+), and after its TCP
// keepalive gives up (tcp_keepalives_idle + interval × count);
// idle_in_transaction_session_timeout is counted too although the driver
// never leaves a transaction open. The smallest of those set is the
// session's silence bound, read when the connection is pinned; the lease's
// backend.Deadliner deadline is the last successful command plus that bound
// less 1% and 100ms, so a holder resumed from a freeze, or cut off by a
// partition, reports the loss before the server can have freed the lock. A
// URL-opened advisory Locker sets idle_session_timeout to its
// session_timeout parameter (default 30s) and TCP keepalives to give up
// within it; with New, whatever the pool's sessions have applies (the
// defaults — no idle timeout, two hours of TCP keepalive — are then how long
// a partitioned holder blocks others).
//
// Capabilities: Fencing, Reentrant (within one Locker), Notify,
// SessionBound. Not claimed: Expiring (no TTL: WithTTL is validated and
// ignored), Durable (a restart ends every session and lock; the fence
// survives), Fair. Each held or waited-for lock occupies one connection of
// the pool; an acquisition beyond the pool's size waits for a connection
// within its ctx.
//
// # Inspection and forced release (Locker.Inspect, Locker.ForceRelease)
//
// Both modes store the acquisition's WithMetadata with the lock (a nested
// acquisition keeps the first hold's).
//
// Row mode: Inspect reads the lease row — owner, metadata, token, nested
// holds (the holds array), and the TTL left by the database clock; Waiters
// is -1 (pollers are queued nowhere). ForceRelease reads the row FOR UPDATE
// and frees it (no holds, expiry at the epoch, fence kept) in one
// transaction, with WithNotify also notifying its waiters, and returns
// exactly the tenure it ended; the evicted holder's Refresh and Release get
// ErrNotHeld, and the next tenure's token is the fence + 1.
//
// Advisory mode: the lock statement records the holder (owner, metadata,
// one hold, backend pid) in the key's advisory-table row while it takes
// the lock; nested holds add to the recorded count (one statement each).
// Inspect joins that row with pg_locks: held when a session holds the
// advisory lock (SessionBound, TTL 0), the holder shown from the record
// (read again, a few times, while a new grant is recording itself), and
// Waiters the sessions waiting for it in pg_locks. ForceRelease locks the
// record (so no new grant can record itself meanwhile) and ends the
// holder's session with pg_terminate_backend(pid, 5000) — only if pg_locks
// shows that recorded pid holding the lock, checked in the same statement,
// so a pid whose session no longer holds it is never terminated — and
// waits for the session to exit, which frees the lock. It needs the
// pg_signal_backend role (or superuser; a superuser's session can only be
// terminated by a superuser). The evicted holder's keepalive or next
// Refresh finds its session gone (ErrLockLost); the next grant's token is
// the recorded fence + 1.
//
// # Bounded fencing records (row mode)
//
// The fence lives in the lease row, so a table that kept every row would
// grow by one row per distinct key ever locked. Each row-mode Locker runs a
// background cleanup (WithCleanup; URL cleanup_interval, cleanup_grace,
// cleanup_batch; default every minute, jittered, grace 10 minutes, 500 rows
// per transaction, at most 20 transactions per run; interval 0 disables
// it). A pass finds rows free for longer than the grace period (released
// rows count as free since the epoch), then, in one transaction, takes the
// table in SHARE ROW EXCLUSIVE mode (lock_timeout 2s), deletes those rows
// still free, and raises their buckets' floor rows to at least each deleted
// row's fence. The floors are 1,024 rows of the same table, keyed 0xFF 0xFE
// and the bucket (the first bits of the key's SHA-256) — never valid
// UTF-8, so never a lock key — with an expiry at the epoch. A new row's
// first fence is its bucket's floor + 1.
//
// Guarantee: a key's tokens stay strictly increasing across deletions.
// The table lock conflicts with the ROW EXCLUSIVE lock every writing
// statement holds until it commits, and PostgreSQL takes a statement's
// table locks before its snapshot: an acquisition either committed before
// the pass deleted (the pass then sees its row held or fresh and keeps
// it), or takes its snapshot after the pass committed and reads the raised
// floor. A held row is never deleted. Passes of many processes serialize
// on the table lock. Cost: an acquisition reads its floor row in the same
// statement (a primary-key lookup); every write on the table waits for the
// few milliseconds a pass holds the table lock. The table then holds the
// rows of locks held or free for less than the grace period, plus at most
// 1,024 floor rows.
//
// The advisory table is not cleaned up: it keeps one row per distinct key
// ever locked. Its row is both the key's fence counter and its lock-id
// registration, and every process caches key → lock id, so deleting a row
// soundly needs all of the following, none of which this release has:
// (1) the pass must prove the key free by taking its lock id with
// pg_try_advisory_xact_lock in the deleting transaction (a session lock on
// the id makes it fail), raising a floor in that transaction; (2) a grant
// that finds no row for its cached (id, key) after taking the advisory
// lock — the pass deleted it while the grant waited, or the id now belongs
// to another key — must give the lock back and re-register instead of
// failing with ErrUnavailable as it does now (today no token is issued
// then, so nothing unsound happens, but every such race would fail an
// acquisition); (3) re-registration must start the new row's fence from
// the floor read with FOR SHARE, because the registering INSERT … ON
// CONFLICT waits on the deleted row's unique entry after its snapshot was
// taken, so a plain floor read there could see the floor from before the
// pass and reissue a token. Row mode's table lock cannot stand in for
// (1)–(3): a waiting Acquire's statement holds the table's ROW EXCLUSIVE
// lock for as long as it waits in pg_advisory_lock, so a pass would queue
// behind it until lock_timeout, stalling every writer queued behind the
// pass. These were not built and tested in the time of this change, so the
// table is left unbounded rather than bounded unsoundly.
//
// # Schema
//
// Tables are created only when asked (WithCreateTable, create_table=true).
// A table of an older release lacking a column is upgraded on first use
// (ALTER TABLE … ADD COLUMN IF NOT EXISTS, nullable) with WithCreateTable;
// without it, it is refused with ErrInvalidOption and the ALTER TABLE
// statement that upgrades it. Row mode (default table distlock_leases):
//
//	CREATE TABLE IF NOT EXISTS distlock_leases (
//	  lock_key   bytea       PRIMARY KEY, -- the key's bytes; 0xFFFE…: a floor row
//	  owner      bytea       NOT NULL,    -- holder identity
//	  holds      bytea[]     NOT NULL,    -- request id of each live hold
//	  expires_at timestamptz NOT NULL,    -- database clock; past when free
//	  fence      bigint      NOT NULL,    -- last token issued; a floor row: the floor
//	  metadata   bytea                    -- the holder's WithMetadata
//	)
//
// Advisory mode (default table distlock_advisory):
//
//	CREATE TABLE IF NOT EXISTS distlock_advisory (
//	  lock_id  bigint  PRIMARY KEY,   -- the pg_advisory_lock id
//	  lock_key bytea   NOT NULL UNIQUE,
//	  fence    bigint  NOT NULL,      -- last token issued; never reset
//	  owner    bytea,                 -- holder of the last token
//	  metadata bytea,                 -- its WithMetadata
//	  holds    integer,               -- its nested holds
//	  pid      integer                -- its backend pid
//	)
//
// DDL returns these statements for a table name. One database is a single
// point of failure; an asynchronous replica promoted after a failover may
// lack committed rows (fences could repeat, two owners could hold a row),
// so failover is not claimed safe.
//
// Tested on PostgreSQL 15.
//
// (*distlock.Locker).As answers *Mode and **pgxpool.Pool.
package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// Mode selects the locking mechanism.
type Mode string

// The modes.
const (
	// ModeRow is a lease row with a TTL (the default).
	ModeRow Mode = "row"
	// ModeAdvisory is a session-level advisory lock on a pinned
	// connection.
	ModeAdvisory Mode = "advisory"
)

// Default table names of the two modes.
const (
	DefaultRowTable      = "distlock_leases"
	DefaultAdvisoryTable = "distlock_advisory"
)

// DefaultKeepalive is how often advisory mode checks each pinned
// connection.
const DefaultKeepalive = time.Second

// dialect is how PostgreSQL names tables: lower-case identifiers,
// double-quoted, schema.table.
var dialect = sqllock.Dialect{
	Ident:     regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`),
	IdentDesc: "1-63 lower-case letters, digits or '_', not starting with a digit",
	Qualifier: "schema",
	Quote:     `"`,
}

// schemas are the tables of the modes.
var schemas = []sqllock.Schema{
	{Mode: string(ModeRow), DefaultTable: DefaultRowTable, DDL: rowDDL},
	{Mode: string(ModeAdvisory), DefaultTable: DefaultAdvisoryTable, DDL: advisoryDDL},
}

// Option configures New. Every option checks its value: New (and
// distlock.Open with a postgres:// URL) returns an error wrapping
// distlock.ErrInvalidOption that names the first invalid one.
type Option func(*config)

type config struct {
	sqllock.Config
	notify bool
}

// WithMode selects the mechanism (default ModeRow); anything but ModeRow
// and ModeAdvisory is invalid.
func WithMode(m Mode) Option {
	return func(c *config) { c.SetMode(string(m), string(ModeRow), string(ModeAdvisory)) }
}

// WithTable names the lock table: an identifier of lower-case letters,
// digits and '_' (at most 63 bytes, not starting with a digit), optionally
// qualified by a schema ("schema.table"). Anything else is invalid; a valid
// name is double-quoted into the statements. In advisory mode it is also
// the namespace of the lock ids.
func WithTable(name string) Option {
	return func(c *config) { c.SetTable(dialect, name) }
}

// WithCreateTable controls whether the table is created with CREATE TABLE IF
// NOT EXISTS on first use (default false: manage the schema with DDL).
func WithCreateTable(on bool) Option {
	return func(c *config) { c.CreateTable = on }
}

// WithNotify makes row mode announce every release that frees a row with
// NOTIFY on a channel named after the table, and wait for it with LISTEN on
// one connection per Locker: waiters wake on a release instead of polling
// (Notify). Default off. LISTEN needs a real session, so a Locker with
// notifications is not safe behind a transaction-pooling proxy. Advisory
// mode ignores it (its waits are woken by the server anyway).
func WithNotify(on bool) Option {
	return func(c *config) { c.notify = on }
}

// WithKeepalive sets how often advisory mode checks each pinned connection
// (default DefaultKeepalive; at most a third of the session's silence
// bound). It must be positive. Row mode ignores it.
func WithKeepalive(d time.Duration) Option {
	return func(c *config) { c.SetKeepalive(d) }
}

// WithCleanup sets row mode's deletion of free lease rows (see "Bounded
// fencing records" in the package doc): every interval (jittered), each
// Locker deletes rows of locks free for longer than grace, at most batch
// per transaction, raising their buckets' fence floors first. interval 0
// disables it (rows are then kept forever, as before). Defaults: every
// minute, grace 10 minutes, batch 500. interval and grace must not be
// negative, batch must be in [1, 100000]. Advisory mode ignores it.
func WithCleanup(interval, grace time.Duration, batch int) Option {
	return func(c *config) { c.SetCleanup(interval, grace, batch) }
}

// WithDefaults sets distlock options applied to every acquisition of the
// Locker (for example distlock.WithTTL).
func WithDefaults(opts ...distlock.Option) Option {
	return func(c *config) { c.Defaults = append(c.Defaults, opts...) }
}

// newConfig applies opts to the defaults; its error is the first invalid
// option's.
func newConfig(opts []Option) (config, error) {
	c := config{Config: sqllock.Config{Backend: "postgres", Mode: string(ModeRow), Keepalive: DefaultKeepalive, Cleanup: sqllock.DefaultCleanup}}
	err := sqllock.Apply(&c, &c.Config, schemas, opts)
	return c, err
}

// New returns a Locker over pool. New does not take ownership of pool:
// Close leaves it open. In advisory mode each held or waited-for lock
// occupies one of the pool's connections until it is released.
//
// New checks every option (mode, table name, keepalive) and a nil pool: it
// returns an error wrapping distlock.ErrInvalidOption naming the first
// invalid one, and never panics. It does not contact the server; the table
// is created on first use if WithCreateTable(true).
func New(pool *pgxpool.Pool, opts ...Option) (*distlock.Locker, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, fmt.Errorf("%w: postgres: New: nil *pgxpool.Pool", backend.ErrInvalidOption)
	}
	return distlock.New(newDriver(pool, nil, c), "postgres", c.Defaults...), nil
}

// modeDriver is a backend.Driver of either mode.
type modeDriver interface {
	backend.Driver
	backend.Aser
	backend.ErrorClassifier
	common() *base
}

// newDriver is the one path from a checked configuration to a driver, for
// New and the URL opener. closePool, if not nil, closes a pool the driver
// owns.
func newDriver(pool *pgxpool.Pool, closePool func() error, c config) modeDriver {
	b := &base{Base: sqllock.NewBase(dialect, schemas, &c.Config, closePool), pool: pool}
	if c.Mode == string(ModeAdvisory) {
		return newAdvDriver(b, c.Keepalive)
	}
	if c.notify {
		return notifyRowDriver{newRowDriver(b, true)}
	}
	return newRowDriver(b, false)
}

// base is what both modes share.
type base struct {
	*sqllock.Base
	pool    *pgxpool.Pool
	cleanup sqllock.Pass // row mode's cleanup pass
}

func (b *base) common() *base { return b }

// Close stops background work and closes a URL-opened pool.
func (b *base) Close() error { return b.Shutdown() }

// ErrorCode implements backend.ErrorClassifier; see errorCode.
func (b *base) ErrorCode(err error) backend.Code { return errorCode(err) }

// ready creates the table once, if asked to (and fails once ctx has
// ended).
func (b *base) ready(ctx context.Context) error {
	return b.Ready(ctx, func(ctx context.Context) error {
		if b.Create {
			if _, err := b.pool.Exec(ctx, b.CreateSQL); err != nil {
				// Two sessions creating the table at once collide on a
				// catalog's unique index (the loser waits for the winner's
				// commit): the table exists then.
				if c := pgCode(err); c != "23505" && c != "42P07" && c != "42710" {
					return fmt.Errorf("create lock table: %w", failed(ctx, err))
				}
			}
		}
		if err := b.Upgrade(ctx, modeColumns[Mode(b.Mode)], b.schemaExec()); err != nil {
			return err
		}
		if b.cleanup != nil {
			b.StartCleanup(b.Cleanup, b.cleanup)
		}
		return nil
	})
}

// modeColumns are the columns a mode's table of an older release may lack.
var modeColumns = map[Mode][]sqllock.Column{
	ModeRow: {{Name: "metadata", Why: "predates lock metadata", Add: "ADD COLUMN IF NOT EXISTS metadata bytea"}},
	ModeAdvisory: {{Name: "owner, metadata, holds, pid", Why: "predates holder records",
		Add: "ADD COLUMN IF NOT EXISTS owner bytea, ADD COLUMN IF NOT EXISTS metadata bytea, ADD COLUMN IF NOT EXISTS holds integer, ADD COLUMN IF NOT EXISTS pid integer"}},
}

// schemaExec is the schema access of sqllock.Base.Upgrade.
func (b *base) schemaExec() sqllock.SchemaExec {
	return sqllock.SchemaExec{
		Exec: func(ctx context.Context, q string) error {
			_, err := b.pool.Exec(ctx, q)
			return failed(ctx, err) // with the hint when the table is missing
		},
		Missing: func(err error) bool { return pgCode(err) == "42703" },
		Exists:  func(err error) bool { return pgCode(err) == "42701" },
	}
}

// DDL returns the CREATE TABLE statement of mode's table, for users who
// manage the schema themselves. table "" means the mode's default table. An
// invalid mode or table name gives an error wrapping ErrInvalidOption.
func DDL(mode Mode, table string) (string, error) {
	return dialect.DDL(schemas, string(mode), table)
}

func rowDDL(table string) string {
	return `CREATE TABLE IF NOT EXISTS ` + table + ` (
  lock_key   bytea       PRIMARY KEY,
  owner      bytea       NOT NULL,
  holds      bytea[]     NOT NULL,
  expires_at timestamptz NOT NULL,
  fence      bigint      NOT NULL,
  metadata   bytea
)`
}

func advisoryDDL(table string) string {
	return `CREATE TABLE IF NOT EXISTS ` + table + ` (
  lock_id  bigint  PRIMARY KEY,
  lock_key bytea   NOT NULL UNIQUE,
  fence    bigint  NOT NULL,
  owner    bytea,
  metadata bytea,
  holds    integer,
  pid      integer
)`
}

// quoteIdent quotes a name as one identifier (a LISTEN channel), doubling
// any '"'.
func quoteIdent(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// quoteLiteral quotes a name as a string literal, doubling any "'".
func quoteLiteral(name string) string { return `'` + strings.ReplaceAll(name, `'`, `''`) + `'` }

// lockID is candidate i of key's advisory lock id in namespace ns.
func lockID(ns, key string, i uint32) int64 {
	h := sha256.New()
	h.Write([]byte(ns))
	var sep [5]byte
	binary.BigEndian.PutUint32(sep[1:], i)
	h.Write(sep[:])
	h.Write([]byte(key))
	return int64(binary.BigEndian.Uint64(h.Sum(nil)))
}

// ttlMicros is sqllock.TTLMicros: whole microseconds (timestamptz),
// rounded up.
var ttlMicros = sqllock.TTLMicros
