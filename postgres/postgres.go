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
			if err := createTable(ctx, b.pool, b.CreateSQL); err != nil {
				return fmt.Errorf("create lock table: %w", err)
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

// createTable runs ddl, a CREATE TABLE IF NOT EXISTS. Two sessions
// creating a table at once collide on a catalog's unique index (the loser
// waits for the winner's commit): the table exists then.
func createTable(ctx context.Context, pool *pgxpool.Pool, ddl string) error {
	if _, err := pool.Exec(ctx, ddl); err != nil {
		if c := pgCode(err); c != "23505" && c != "42P07" && c != "42710" {
			return failed(ctx, err)
		}
	}
	return nil
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
