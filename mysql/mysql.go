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
