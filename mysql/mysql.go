// Package mysql is distlock's MySQL/MariaDB backend, registered as
// "mysql://". It offers the two database locks of the seeds (003: a lock
// table with a unique key, and InnoDB's exclusive row lock taken with
// SELECT … FOR UPDATE), each with the weaknesses the seeds list repaired.
// One Locker uses one mode; both keep a per-key fencing counter in an InnoDB
// row.
//
// # Mode "row" (the default): a lease row
//
// A lock is one row of a lock table (DDL returns the statement; the table is
// created on first use unless WithCreateTable(false)). The primary key is the
// SHA-256 of the key, so any key of up to 1,024 bytes, whatever its bytes,
// case or trailing spaces, names its own row; the key itself is kept in a
// VARBINARY column for humans and no SQL text is ever built from it.
//
// Acquire is one INSERT … ON DUPLICATE KEY UPDATE: one round trip, one
// atomic statement. It takes the row when it is free or expired (a new
// tenure: fence+1), nests when the row is already held by the same owner
// (hold count+1, same fence, expiry never shortened), and otherwise changes
// nothing. Its outcome travels back in the OK packet through
// LAST_INSERT_ID(expr): the new fence, or the holder's remaining time with
// the top bit set when the lock is busy, so the result does not depend on the
// client's CLIENT_FOUND_ROWS flag. Release and Refresh are single UPDATEs
// checked on owner AND fence, so a stale handle — even of the same owner id —
// never touches a later tenure. Automatic refreshes that distlock's
// scheduler finds due together are batched (backend.BatchRefresher): one
// UPDATE per TTL names all their rows by primary key and tenure, one round
// trip instead of one per lease; when its count of changed rows does not
// show that every lease was extended, each is refreshed on its own for its
// exact outcome. Expiry is computed by the database clock:
// UTC_TIMESTAMP(6), which is NOW(6) in UTC, so neither the client's clock nor
// a session time_zone (or a DST change) can move an expiry. The client sends
// durations, never times; a TTL is sent in whole microseconds (the
// resolution of DATETIME(6)), rounded up, so the server never holds a lock
// for less than its TTL. An acquire whose reply is lost (its context ended,
// or the connection broke, after the statement may have run) is undone in
// the background: every hold records its own random id in the row (a list,
// appended to when a hold nests, an id removed when its hold is released),
// and an owner-checked UPDATE matching that id gives back exactly that hold
// — also when the same WithOwner owner has nested in it meanwhile, or holds
// others — repeated for a few seconds in case the request is still in
// flight. A table created by an older release (one request id per row, in
// acq_id) gets the hold_ids column added on first use; with
// WithCreateTable(false) it is refused with ErrInvalidOption and the ALTER
// TABLE statement that upgrades it.
//
// Capabilities: Fencing (the counter stays in the row across releases,
// expiries and takeovers, and is advanced with LAST_INSERT_ID(fence+1) in the
// acquiring statement), Reentrant (owner and hold count in the row, across
// Lockers and processes), Expiring (distlock refreshes the row every ttl/3
// and ends the lease locally before the database could let another owner in)
// and Durable (a committed InnoDB row survives a crash and restart of the
// server with the default innodb_flush_log_at_trx_commit=1; the fence then
// keeps increasing).
//
// Not claimed in row mode: Notify (waiters poll, but never sleep past the
// holder's remaining time, which the busy reply carries), Fair, SessionBound
// (a crashed holder's lock ends when its TTL runs out, not when its
// connection dies). A jump of the database server's wall clock moves every
// expiry with it (forward: leases end early, before the holders' local
// deadlines); keep the server's clock disciplined (slewed, not stepped).
//
// # Mode "forupdate": an InnoDB row lock on a pinned connection
//
// A lock is InnoDB's exclusive lock on the key's row, held by an open
// transaction on a *sql.Conn pinned for the lease. The row must exist before
// it is locked — a locking read of a missing row takes a gap lock, and two
// sessions that both hold it deadlock on INSERT — so a missing row is
// created with an autocommit INSERT IGNORE after the locking transaction is
// rolled back, and then locked. TryAcquire uses FOR UPDATE NOWAIT; Acquire
// waits inside the server (a lock-wait timeout, 1205, leaves the
// transaction open: it is rolled back and the wait starts afresh), and when
// its context ends the waiting statement is stopped with KILL QUERY from
// another connection and the connection is discarded. Release is COMMIT. A
// connection whose lock was abandoned — cancelled, failed, lost — is never
// returned to the pool (it is discarded with driver.ErrBadConn), so no other
// goroutine can run inside a transaction that holds a lock.
//
// The fencing token is not kept in the locked row: it is advanced and
// committed on a second connection while the row lock is held (one more
// round trip), and the pinned connection is checked to be alive afterwards.
// A token is therefore durable before anyone sees it, and the token of a
// holder whose connection is killed is never handed out again — advancing
// the counter inside the lock's own transaction would roll it back with the
// dead session, and the next holder would get the same token.
//
// Loss: a keepalive pings every pinned connection (WithKeepalive, default
// 1s, at most a third of the session's idle limit). The idle limit is the
// smallest non-zero of the session's wait_timeout and, on MariaDB, its
// idle_transaction_timeout, idle_readonly_transaction_timeout and
// idle_write_transaction_timeout, read when the lock is taken: any of them
// can end a holder's silent session, and with it the lock, and the
// MariaDB ones can be far shorter than wait_timeout. The pings keep the
// idle limits from ending an idle holder's session; when the connection
// was killed, timed out or broke, the lease ends (Done closes with
// ErrLockLost) within one interval. A holder that cannot reach the server
// (partition, frozen process) keeps its lock on the server until the server
// ends the silent session after its idle limit; the holder declares the
// lock lost before that moment (last successful command + idle limit − 1% −
// 100ms), and before closing its connection, so it always hears of the loss
// before another owner can acquire. A process frozen (SIGSTOP, a suspended
// VM) for longer than the idle limit cannot hear anything while frozen;
// when it resumes, the lease reports the loss the moment it is looked at
// (Err, Done, Context compare that deadline synchronously, through
// backend.Deadliner), before the keepalive has even run — and the fencing
// token makes a write it had already started harmless. A URL-opened Locker
// sets wait_timeout to its sessionTimeout parameter (default 30s); with New,
// wait_timeout is whatever the DSN sets (the server default is 8 hours, and
// that is then how long a partitioned holder blocks others, unless an idle
// transaction limit is shorter).
//
// Capabilities: Fencing, Reentrant (within one Locker: the lock belongs to a
// connection of that Locker; another Locker using the same owner id contends
// like any other owner; a nested acquisition is granted only after a ping on
// that connection succeeds and the key's record still names its connection
// and token — a connection the server ended unnoticed, by ForceRelease, KILL
// or a restart, ends the owner's leases with ErrLockLost, and the
// acquisition goes to the server as a new one), Notify (waiters are queued and woken by InnoDB on
// COMMIT), SessionBound (the server rolls back, freeing the lock, when the
// holder's connection closes or is killed, and after its idle limit of
// silence).
//
// Not claimed in forupdate mode: Expiring (there is no TTL: WithTTL is
// validated and ignored; a live but stuck holder keeps the lock as long as
// its connection lives), Durable (a server restart ends every session and
// so every lock — only the fence counter survives), Fair (InnoDB grants
// waiting lock requests in no promised order). Each held or waiting lock
// occupies one connection: with a bounded pool (MaxOpenConns) one connection
// is kept free for the fence counter and KILL QUERY, and an acquisition
// beyond that fails at once with ErrUnavailable instead of waiting.
//
// # Both modes
//
// One database is a single point of failure: locks are exactly as available
// as the primary. Failover to an asynchronous replica can lose committed
// rows — two owners may then hold a lock and fences may repeat — so it is
// not claimed safe. Durability of rows and fences assumes
// innodb_flush_log_at_trx_commit=1 (the default). Both modes delete the
// rows of locks long free (below). The lock tables of the two modes
// differ; give each mode its own table (the defaults do). Statements use
// only parameters for keys and owners; the table name is validated as an
// identifier and quoted.
//
// # Inspection and forced release (Locker.Inspect, Locker.ForceRelease)
//
// Both modes store the acquisition's WithMetadata with the lock (a nested
// acquisition keeps the first hold's). The Locker's own Inspect method and
// Info type of earlier releases are gone: use Locker.Inspect.
//
// Row mode: Inspect reads the lease row — owner, metadata, token, nested
// holds and the TTL left by the database clock; Waiters is -1 (pollers are
// queued nowhere). ForceRelease reads the row FOR UPDATE and frees it (no
// holds, expiry in the past, fence kept) in one transaction, so it returns
// exactly the tenure it ended; the evicted holder's Refresh and Release get
// ErrNotHeld, and the next tenure's token is the fence + 1.
//
// Forupdate mode: the statement that issues the token records the holder
// (owner, metadata, one hold, connection id) in the key's fence row while
// the row lock is held; nested holds add to the recorded count (one
// statement each). Inspect tells whether the row is locked with a locking
// read NOWAIT rolled back at once (when the row is free it is taken for
// that instant, so a TryAcquire at the same moment may find it busy) and
// shows the recorded holder (SessionBound, TTL 0); Waiters is -1: InnoDB's
// information_schema lock tables are served from a cache that stays frozen
// while anyone reads them more often than every 0.1s, so a count from them
// is not reliable. ForceRelease queues a connection of its own for the row
// lock, checks (after letting that cache refresh) that
// INNODB_LOCK_WAITS shows the recorded connection's running transaction
// blocking it — a connection that merely reuses the pooled session for
// another lock blocks nothing there — then ends that connection with KILL
// CONNECTION and waits until it is gone (its transaction rolled back, the
// lock free), and gives its own place in the queue up. The check and the
// KILL are two statements: a holder that commits in that instant and whose
// pooled connection takes another lock before the KILL arrives would lose
// that lock instead (MariaDB has no conditional KILL; the window is one
// round trip). KILL needs the same user or CONNECTION ADMIN. The evicted
// holder's keepalive finds its connection gone (ErrLockLost); the next
// grant's token is the fence + 1.
//
// # Bounded fencing records (row mode)
//
// (Forupdate mode: see the next section.) Each row-mode Locker runs a background cleanup (WithCleanup; URL
// cleanup_interval, cleanup_grace, cleanup_batch; default every minute,
// jittered, grace 10 minutes, 500 rows per transaction, at most 20
// transactions per run; interval 0 disables it). A pass finds rows free for
// longer than the grace period (a released row counts as free since 1970),
// then in one transaction locks their buckets' floor rows (FOR UPDATE, in
// key order), re-reads the candidates FOR UPDATE, deletes those still free
// and raises each floor to at least the deleted rows' fences. The floors
// are 1,024 rows of the same table: key_hash 30 zero bytes and the bucket
// (the first bits of the key's SHA-256; no key hashes to such a value),
// lock_key empty (a lock key never is), never held, created by each
// Locker on first use (INSERT IGNORE; the floor read must find a row: a
// locking read of a missing row would take a gap lock, and acquisitions
// inserting into that gap would deadlock). A new row's first fence is its
// bucket's floor + 1:
//
//	INSERT INTO distlock_leases (…, fence, …) VALUES (…,
//	  LAST_INSERT_ID(1 + IFNULL((SELECT f.fence FROM (SELECT fence FROM distlock_leases
//	    WHERE key_hash = <floor>) AS f), 0)), …) ON DUPLICATE KEY UPDATE …
//
// Guarantee: a key's tokens stay strictly increasing across deletions, and
// a held row is never deleted. Under REPEATABLE READ (InnoDB's default)
// InnoDB reads the rows a non-SELECT statement reads with shared locks, so
// the acquisition's floor read waits for a pass holding that floor, and a
// pass waits for an acquisition that read it: either the acquisition
// committed first (and the pass, re-reading the row with a lock, keeps it)
// or it reads the raised floor. Both take the floor's lock before any lease
// row's, so they cannot deadlock; passes of many processes serialize on
// the floors. Sessions at READ COMMITTED or below read the floor without a
// lock: where any Locker's sessions on the table use a weaker isolation,
// disable cleanup on every Locker of the table (WithCleanup(0, 0, 1)). Cost: an acquisition reads its floor row in the same statement
// (a primary-key lookup with a shared lock, through a derived table,
// which MySQL needs to read the table an INSERT writes; the round trips
// are unchanged, and BenchmarkRowFloorRead, the cycle with and without it
// side by side, measured no difference: 768µs against 775µs, ±17%). The table then holds the rows of locks held or free for
// less than the grace period, plus at most 1,024 floor rows.
//
// # Bounded fencing records (forupdate mode)
//
// A key has two rows: kind 0, the row locked FOR UPDATE, and kind 1, its
// fence and holder record. The statement that issues the token (already
// one round trip of every grant) also sets kind 1's granted_at to the
// database clock's UTC_TIMESTAMP(6) and starts a new kind-1 row at its
// bucket's floor + 1; the floors are 1,024 rows of kind 2 in the same table
// (key_hash as in row mode, lock_key empty), created by each Locker on
// first use. The same background cleanup (WithCleanup, same defaults) runs
// passes that, in one REPEATABLE READ transaction, lock the candidates'
// floor rows (FOR UPDATE, in key order), lock at most a batch of the
// candidates' kind-0 rows with FOR UPDATE SKIP LOCKED (candidates: twice a
// batch of keys last granted longer than the grace ago, read from a random
// point of the key space, so held keys neither fill a batch nor hide the
// others), re-read their kind-1 rows FOR UPDATE, delete both rows of those
// still granted longer than the grace ago and raise each floor to at least
// their fences. A held lock's kind-0 row is locked by its holder, so the
// pass skips it: a held key is never deleted, however long ago it was
// granted. Rows written before granted_at existed count as granted long
// ago.
//
// Guarantee: a key's tokens stay strictly increasing across deletions. A
// token is issued only while the acquisition holds the kind-0 row lock. An
// acquisition that held it before a pass made the pass skip the key; any
// other waits for the pass's lock on the row, finds the row deleted,
// recreates it, locks it, and its grant statement reads the floor the pass
// raised and committed (with a shared lock, as in row mode: a pass raising
// it is waited for). Costs and limits: the floor read in the grant statement
// (no extra round trip); while a pass holds a long-free key's row (one
// transaction, milliseconds), TryAcquire of that key reports it busy,
// Acquire waits for the pass, and Inspect shows the last holder's record as
// held (its locking probe finds the row locked). A grant whose pinned
// connection dies while its token statement is in flight may deadlock with
// a pass; InnoDB rolls one back (the pass retries on its next run, the
// grant fails as it would anyway). Every process using the table must run
// a release that starts new fence rows at the floor: an older one starts a
// deleted key's fence again at 1, so upgrade them all before any Locker
// runs the cleanup (or disable it, WithCleanup(0, 0, 1), until then). The
// table then holds two rows per key
// held or granted within the grace period, plus at most 1,024 floor rows:
// 100,000 distinct short-lived locks left 100,000 keys (200,000 rows)
// before; a forced cleanup (grace 0) deleted all 100,000 in 3 to 4s,
// leaving only the floors (TestMeasureForUpdateRowsLeft,
// DISTLOCK_MEASURE_ROWS=100000).
//
// The row-mode table (DDL returns it for any name):
//
//	CREATE TABLE IF NOT EXISTS distlock_leases (
//	  key_hash   BINARY(32)      NOT NULL, -- SHA-256 of the key; 0…0+bucket: a floor row
//	  lock_key   VARBINARY(1024) NOT NULL, -- the key; empty in a floor row
//	  owner      VARBINARY(256)  NOT NULL,
//	  holds      INT UNSIGNED    NOT NULL, -- 0 when free
//	  expires_at DATETIME(6)     NOT NULL, -- UTC, database clock
//	  fence      BIGINT UNSIGNED NOT NULL, -- last token issued; a floor row: the floor
//	  hold_ids   MEDIUMBLOB      NULL,
//	  metadata   VARBINARY(1024) NULL,     -- the holder's WithMetadata
//	  PRIMARY KEY (key_hash)
//	) ENGINE=InnoDB
//
// A table of an older release lacking hold_ids or metadata (or, in
// forupdate mode, the holder columns or granted_at) gets them added on first use with
// WithCreateTable (the default); without it, it is refused with
// ErrInvalidOption and the ALTER TABLE statement that upgrades it.
//
// Tested on MariaDB 10.11. The SQL is also valid on MySQL 8.0+; the
// differences handled are: NOWAIT fails with 1205 on MariaDB and 3572 on
// MySQL; VALUES() in ON DUPLICATE KEY UPDATE (deprecated in MySQL 8.0.20) is
// not used; statements give the same result whether UPDATE assignments see
// earlier assignments (MySQL's left-to-right rule) or not (MariaDB's
// SIMULTANEOUS_ASSIGNMENT sql_mode).
//
// New takes a *sql.DB, NewSqlx a *sqlx.DB. (*distlock.Locker).As answers
// *Mode, **sql.DB and, for a Locker made by NewSqlx, **sqlx.DB.
package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"regexp"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// Mode selects the locking mechanism of a Locker.
type Mode string

const (
	// ModeRow keeps each lock as a lease row with an owner, a hold count,
	// an expiry on the database clock and a fencing counter.
	ModeRow Mode = "row"
	// ModeForUpdate holds each lock as an InnoDB row lock (SELECT … FOR
	// UPDATE) in an open transaction on a pinned connection.
	ModeForUpdate Mode = "forupdate"
)

// Default table names. The two modes use different table layouts, so they
// default to different tables.
const (
	DefaultRowTable       = "distlock_leases"
	DefaultForUpdateTable = "distlock_rowlocks"
)

// DefaultKeepalive is how often forupdate mode pings each pinned connection.
// A killed or timed-out holder connection ends its lease within this
// interval.
const DefaultKeepalive = time.Second

// dialect is how MySQL names tables: backquoted identifiers, db.table.
var dialect = sqllock.Dialect{
	Ident:     regexp.MustCompile(`^[A-Za-z0-9_$]{1,64}$`),
	IdentDesc: "1-64 letters, digits, '_' or '$'",
	Qualifier: "db",
	Quote:     "`",
}

// schemas are the tables of the modes.
var schemas = []sqllock.Schema{
	{Mode: string(ModeRow), DefaultTable: DefaultRowTable, DDL: rowDDL},
	{Mode: string(ModeForUpdate), DefaultTable: DefaultForUpdateTable, DDL: forUpdateDDL},
}

// Option configures New. Every option checks its value: New (and
// distlock.Open with a mysql:// URL) returns an error wrapping
// distlock.ErrInvalidOption that names the first invalid one.
type Option func(*config)

type config struct{ sqllock.Config }

// WithMode selects the mechanism (default ModeRow); anything but ModeRow
// and ModeForUpdate is invalid.
func WithMode(m Mode) Option {
	return func(c *config) { c.SetMode(string(m), string(ModeRow), string(ModeForUpdate)) }
}

// WithTable names the lock table: an identifier of letters, digits, '_' and
// '$' (at most 64), optionally qualified by a database name ("db.table").
// Anything else is invalid; a valid name is backquoted into the statements,
// no SQL is built from anything else.
func WithTable(name string) Option {
	return func(c *config) { c.SetTable(dialect, name) }
}

// WithCreateTable controls whether the lock table is created with CREATE
// TABLE IF NOT EXISTS on first use (default true). Turn it off to manage the
// schema yourself with the statement DDL returns.
func WithCreateTable(on bool) Option {
	return func(c *config) { c.CreateTable = on }
}

// WithKeepalive sets how often forupdate mode pings each pinned connection
// (default DefaultKeepalive; a third of the session's idle limit — the
// smallest of wait_timeout and MariaDB's idle transaction timeouts — if that
// is shorter). Loss of the connection ends the lease within one interval.
// It must be positive. Row mode ignores it.
func WithKeepalive(d time.Duration) Option {
	return func(c *config) { c.SetKeepalive(d) }
}

// WithCleanup sets the deletion of the rows of free locks (see "Bounded
// fencing records" in the package doc, for each mode): every interval
// (jittered), each Locker deletes rows of locks free (row mode) or, in
// forupdate mode, not held and last granted for longer than grace, at most
// batch per transaction, raising their buckets' fence floors first, so
// every key's tokens stay strictly increasing. interval 0 disables it (rows
// are then kept forever, as before). Defaults: every minute, grace 10
// minutes, batch 500. interval and grace must not be negative, batch must
// be in [1, 100000].
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
	c := config{sqllock.Config{Backend: "mysql", Mode: string(ModeRow), CreateTable: true, Keepalive: DefaultKeepalive, Cleanup: sqllock.DefaultCleanup}}
	err := sqllock.Apply(&c, &c.Config, schemas, opts)
	return c, err
}

// New returns a Locker over db, which must use the go-sql-driver/mysql
// driver; interpolateParams=true in its DSN saves a round trip per
// statement (otherwise every statement with arguments is prepared on the
// server). New does not take ownership of db: Close leaves it open. In
// forupdate mode each held or waiting lock occupies one of db's connections
// until it is released.
//
// New checks every option (mode, table name, keepalive) and a nil db: it
// returns an error wrapping distlock.ErrInvalidOption naming the first
// invalid one, and never panics. It does not contact the server; the table
// is created (or checked) on first use.
func New(db *sql.DB, opts ...Option) (*distlock.Locker, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if db == nil {
		return nil, fmt.Errorf("%w: mysql: New: nil *sql.DB", backend.ErrInvalidOption)
	}
	return distlock.New(newDriver(db, nil, c), "mysql", c.Defaults...), nil
}

// modeDriver is a backend.Driver of either mode.
type modeDriver interface {
	backend.Driver
	backend.Aser
	backend.ErrorClassifier
	common() *base
}

// newDriver is the one path from a checked configuration to a driver, for
// New and the URL opener. closeDB, if not nil, closes a db the driver owns.
func newDriver(db *sql.DB, closeDB func() error, c config) modeDriver {
	b := &base{Base: sqllock.NewBase(dialect, schemas, &c.Config, closeDB), db: db, x: rowReader(db)}
	if c.Mode == string(ModeForUpdate) {
		return newFUDriver(b, c.Keepalive)
	}
	return newRowDriver(b)
}

// base is what both modes share: the database, the table, the schema setup
// and background work.
type base struct {
	*sqllock.Base
	db      *sql.DB
	x       *sqlx.DB     // db, for the reads that scan rows into structs (rowReader)
	given   *sqlx.DB     // the *sqlx.DB of NewSqlx, for As; nil from New or a URL
	cleanup sqllock.Pass // the mode's cleanup pass
}

func (b *base) common() *base { return b }

// Close stops background work and closes a URL-opened pool.
func (b *base) Close() error { return b.Shutdown() }

// ErrorCode implements backend.ErrorClassifier; see errorCode.
func (b *base) ErrorCode(err error) backend.Code { return errorCode(err) }

// ready creates the table and checks its shape, once (and fails once ctx
// has ended).
func (b *base) ready(ctx context.Context) error {
	return b.Ready(ctx, func(ctx context.Context) error {
		if b.Create {
			if _, err := b.db.ExecContext(ctx, b.CreateSQL); err != nil {
				return fmt.Errorf("create lock table: %w", sqllock.Failed(ctx, err))
			}
		}
		cols, floors := rowColumns, rowInsertFloors
		if b.Mode == string(ModeForUpdate) {
			cols, floors = fuColumns, fuInsertFloors
		}
		if err := b.Upgrade(ctx, cols, b.schemaExec()); err != nil {
			return err
		}
		if err := b.ensureFloors(ctx, floors); err != nil {
			return err
		}
		if b.cleanup != nil {
			b.StartCleanup(b.Cleanup, b.cleanup)
		}
		return nil
	})
}

// DDL returns the CREATE TABLE statement of the lock table for mode, for
// users who manage the schema themselves (WithCreateTable(false)). table ""
// means the mode's default table. An invalid mode or table name gives an
// error wrapping ErrInvalidOption.
func DDL(mode Mode, table string) (string, error) {
	return dialect.DDL(schemas, string(mode), table)
}

func rowDDL(table string) string {
	return `CREATE TABLE IF NOT EXISTS ` + table + ` (
  key_hash   BINARY(32)      NOT NULL COMMENT 'SHA-256 of the lock key',
  lock_key   VARBINARY(1024) NOT NULL COMMENT 'the lock key',
  owner      VARBINARY(256)  NOT NULL COMMENT 'holder identity',
  holds      INT UNSIGNED    NOT NULL COMMENT 'reentrant holds; 0 when free',
  expires_at DATETIME(6)     NOT NULL COMMENT 'UTC, database clock; in the past when free',
  fence      BIGINT UNSIGNED NOT NULL COMMENT 'last fencing token issued; never reset',
  hold_ids   MEDIUMBLOB      NULL     COMMENT 'one id per live hold: 32 hex digits and a comma each',
  metadata   VARBINARY(1024) NULL     COMMENT 'the holder''s WithMetadata',
  PRIMARY KEY (key_hash)
) ENGINE=InnoDB COMMENT='distlock row-mode leases'`
}

func forUpdateDDL(table string) string {
	return `CREATE TABLE IF NOT EXISTS ` + table + ` (
  key_hash BINARY(32)       NOT NULL COMMENT 'SHA-256 of the lock key',
  kind     TINYINT UNSIGNED NOT NULL COMMENT '0: the row locked FOR UPDATE; 1: the fence counter; 2: a fence floor',
  lock_key VARBINARY(1024)  NOT NULL COMMENT 'the lock key; empty in a floor row',
  fence    BIGINT UNSIGNED  NOT NULL DEFAULT 0 COMMENT 'kind 1: last fencing token issued; kind 2: the floor',
  owner    VARBINARY(256)   NULL COMMENT 'kind 1: the holder of the last token',
  metadata VARBINARY(1024)  NULL COMMENT 'kind 1: its WithMetadata',
  holds    INT              NULL COMMENT 'kind 1: its nested holds',
  conn_id  BIGINT UNSIGNED  NULL COMMENT 'kind 1: its connection id',
  granted_at DATETIME(6)    NULL COMMENT 'kind 1: when the last token was issued (UTC, database clock)',
  PRIMARY KEY (key_hash, kind)
) ENGINE=InnoDB COMMENT='distlock forupdate-mode lock rows'`
}

// keyHash is the primary key of a lock: fixed length, binary, so keys that
// differ only in case, trailing spaces or after any byte are distinct rows
// whatever the server's collations.
func keyHash(key string) [32]byte { return sha256.Sum256([]byte(key)) }

// ttlMicros is sqllock.TTLMicros: whole microseconds (DATETIME(6)),
// rounded up.
var ttlMicros = sqllock.TTLMicros
