package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Dialect is the SQL database a guard speaks to.
type Dialect int

const (
	// Postgres is PostgreSQL (through pgx, or database/sql with pgx's
	// stdlib driver): $n placeholders, INSERT … ON CONFLICT … RETURNING.
	Postgres Dialect = iota + 1
	// MySQL is MySQL or MariaDB with InnoDB (go-sql-driver/mysql): ?
	// placeholders, INSERT … ON DUPLICATE KEY UPDATE.
	MySQL
)

// String is the dialect's name: "postgres" or "mysql".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// ErrDialect is returned for an unknown Dialect, or for a pgx call on a
// guard whose dialect is not Postgres.
var ErrDialect = errors.New("fence: unsupported SQL dialect")

// SQL is a fencing guard for a SQL database: it runs a write in a
// transaction only if the resource's highest recorded token is <= the
// write's token, and records the write's token, atomically.
//
// How: the transaction's first statement raises the recorded token to
// GREATEST(recorded, token) and reads it back; that statement takes the
// row's write lock, which the transaction keeps until it ends, so guarded
// writes to one resource are serialized and each sees the latest committed
// token. If the recorded token is higher than the write's, the guard returns
// a *StaleError (errors.Is ErrStale), the transaction is rolled back and the
// write never runs. Otherwise the caller's write runs in the same
// transaction and commits together with the new token, or not at all.
//
// Guarantees, for writes that go through the guard in transactions that
// commit: once a write with token T has committed, no write with a token
// below T commits on that resource. A write with a token equal to the
// recorded one is allowed: it is the same lease writing again (several
// writes under one lease, or a retry after an error that left the outcome
// unknown); the token record does not change, so such a retry is idempotent
// as far as the guard goes, and the whole retry is idempotent when the write
// itself is (set a value, not add to one).
//
// Not guaranteed: reads (a stale holder still reads whatever it likes),
// writes that bypass the guard, anything outside this database (messages
// sent, files written, calls made), and ordering between different
// resources. Tokens compare only within one lock key: protect one resource
// with one lock key, and keep that backend's counter (a Redis that restarts
// without AOF forgets it; tokens then go down and every write is refused —
// safe, but stuck until the resource's token is reset by hand).
//
// Concurrency: a guarded write waits for an in-flight guarded write on the
// same resource, then compares with what that one committed (READ
// COMMITTED, the PostgreSQL default, and any InnoDB level: the guard's
// statements are locking reads and writes, which see the latest committed
// row). Under PostgreSQL REPEATABLE READ or SERIALIZABLE, or on an InnoDB
// deadlock, the database aborts the transaction instead: the error is the
// driver's, nothing was written, and a retry with the same token is safe.
//
// Reads in the write see the previous guarded write's data when the guard
// runs first in the transaction (Tx and TxPgx do that): under InnoDB's
// REPEATABLE READ the snapshot is taken at the first plain read, after the
// guard. With Check in a transaction of your own, call it before any read.
type SQL struct {
	dialect Dialect
	shape   string // "table" or "column"
	table   string // quoted
	key     string // quoted key column
	tok     string // quoted token column
	raise   string // raises the recorded token to GREATEST(recorded, $token)
	read    string // MySQL: reads the recorded token back, locking the row; "" on Postgres (RETURNING)
	ddl     string
}

// identRE is a plain SQL identifier: letters, digits, _ and $, not
// starting with a digit or $, at most 63 bytes (PostgreSQL's limit; MySQL's
// is 64). Anything else is refused rather than quoted, so no name can
// carry SQL.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)

// quoteName validates name (ident or schema.ident) and quotes it for d.
func quoteName(d Dialect, name string, qualified bool) (string, error) {
	parts := []string{name}
	if qualified {
		parts = strings.Split(name, ".")
	}
	if len(parts) > 2 {
		return "", fmt.Errorf("%w: %q (want name or schema.name)", ErrInvalidIdentifier, name)
	}
	q := `"`
	if d == MySQL {
		q = "`"
	}
	for i, p := range parts {
		if !identRE.MatchString(p) {
			return "", fmt.Errorf("%w: %q (want [A-Za-z_][A-Za-z0-9_$]*, at most 63 bytes)", ErrInvalidIdentifier, name)
		}
		parts[i] = q + p + q
	}
	return strings.Join(parts, "."), nil
}

func (d Dialect) valid() error {
	if d != Postgres && d != MySQL {
		return fmt.Errorf("%w: %v", ErrDialect, d)
	}
	return nil
}

// NewSQLTable returns a guard that keeps tokens in a table of their own,
// one row per resource, created on first write; the resource is any string
// (a distlock key is a good choice). Create the table once with DDL():
//
//	-- PostgreSQL
//	CREATE TABLE IF NOT EXISTS distlock_fence (resource TEXT PRIMARY KEY, token BIGINT NOT NULL);
//	-- MySQL / MariaDB
//	CREATE TABLE IF NOT EXISTS distlock_fence (resource VARBINARY(1024) NOT NULL PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB;
//
// table may be schema-qualified (schema.table). It must be a plain
// identifier: anything else gets ErrInvalidIdentifier. (The MySQL upsert
// uses VALUES(), which MySQL 8.0.20+ deprecates with a warning but runs;
// MariaDB has no replacement syntax.) Names are quoted in
// the statements, so on PostgreSQL they are case-sensitive: pass them as
// stored (lower case for tables created without quotes).
func NewSQLTable(d Dialect, table string) (*SQL, error) {
	if err := d.valid(); err != nil {
		return nil, err
	}
	t, err := quoteName(d, table, true)
	if err != nil {
		return nil, err
	}
	g := &SQL{dialect: d, shape: "table", table: t}
	g.key, _ = quoteName(d, "resource", false)
	g.tok, _ = quoteName(d, "token", false)
	switch d {
	case Postgres:
		g.ddl = fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (%s TEXT PRIMARY KEY, %s BIGINT NOT NULL)", t, g.key, g.tok)
		g.raise = fmt.Sprintf("INSERT INTO %s AS f (%s, %s) VALUES ($1, $2) ON CONFLICT (%s) DO UPDATE SET %s = GREATEST(f.%s, EXCLUDED.%s) RETURNING %s",
			t, g.key, g.tok, g.key, g.tok, g.tok, g.tok, g.tok)
	case MySQL:
		g.ddl = fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (%s VARBINARY(%d) NOT NULL PRIMARY KEY, %s BIGINT NOT NULL) ENGINE=InnoDB", t, g.key, maxResource, g.tok)
		g.raise = fmt.Sprintf("INSERT INTO %s (%s, %s) VALUES (?, ?) ON DUPLICATE KEY UPDATE %s = GREATEST(%s, VALUES(%s))",
			t, g.key, g.tok, g.tok, g.tok, g.tok)
		g.read = fmt.Sprintf("SELECT %s FROM %s WHERE %s = ? FOR UPDATE", g.tok, t, g.key)
	}
	return g, nil
}

// NewSQLColumn returns a guard that keeps the token in a column of the
// protected row itself: the row of table whose keyColumn equals the key
// passed to Tx or Check. keyColumn must be unique (the primary key); the
// row must exist (else ErrNoRow: the guard does not create rows). Add the
// column once with DDL() (both dialects):
//
//	ALTER TABLE accounts ADD COLUMN fence_token BIGINT NOT NULL DEFAULT 0;
//
// Every name must be a plain identifier (table may be schema.table):
// anything else gets ErrInvalidIdentifier. Names are quoted, so on
// PostgreSQL they are case-sensitive (see NewSQLTable).
func NewSQLColumn(d Dialect, table, keyColumn, tokenColumn string) (*SQL, error) {
	if err := d.valid(); err != nil {
		return nil, err
	}
	t, err := quoteName(d, table, true)
	if err != nil {
		return nil, err
	}
	k, err := quoteName(d, keyColumn, false)
	if err != nil {
		return nil, err
	}
	c, err := quoteName(d, tokenColumn, false)
	if err != nil {
		return nil, err
	}
	g := &SQL{dialect: d, shape: "column", table: t, key: k, tok: c}
	g.ddl = fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s BIGINT NOT NULL DEFAULT 0", t, c)
	switch d {
	case Postgres:
		g.raise = fmt.Sprintf("UPDATE %s SET %s = GREATEST(%s, $2) WHERE %s = $1 RETURNING %s", t, c, c, k, c)
	case MySQL:
		g.raise = fmt.Sprintf("UPDATE %s SET %s = GREATEST(%s, ?) WHERE %s = ?", t, c, c, k)
		g.read = fmt.Sprintf("SELECT %s FROM %s WHERE %s = ? FOR UPDATE", c, t, k)
	}
	return g, nil
}

// DDL is the statement that prepares the database for this guard: the
// token table's CREATE TABLE IF NOT EXISTS, or the token column's ALTER
// TABLE … ADD COLUMN (run that one once).
func (g *SQL) DDL() string { return g.ddl }

// Dialect reports the guard's dialect.
func (g *SQL) Dialect() Dialect { return g.dialect }

// querier is what the guard needs from a transaction: run a statement, and
// run one that returns at most one token.
type querier struct {
	exec func(ctx context.Context, query string, args ...any) error
	one  func(ctx context.Context, query string, args ...any) (tok int64, found bool, err error)
}

// check raises the recorded token of key to at least token inside the
// caller's transaction and refuses a stale write. It is the guard's whole
// mechanism; Tx, TxPgx, Check and CheckPgx only supply the transaction.
func (g *SQL) check(ctx context.Context, key any, token uint64, q querier) error {
	if err := g.checkArgs(key, token); err != nil {
		return err
	}
	tok := int64(token)
	var (
		rec   int64
		found bool
		err   error
	)
	switch g.dialect {
	case Postgres:
		rec, found, err = q.one(ctx, g.raise, key, tok)
	case MySQL:
		args := []any{key, tok}
		if g.shape == "column" {
			args = []any{tok, key}
		}
		if err = q.exec(ctx, g.raise, args...); err == nil {
			rec, found, err = q.one(ctx, g.read, key)
		}
	}
	if err != nil {
		return fmt.Errorf("fence: %s guard on %s: %w", g.dialect, g.table, err)
	}
	if !found {
		return fmt.Errorf("%w: %s has no row with %s = %v", ErrNoRow, g.table, g.key, key)
	}
	if rec > tok {
		return &StaleError{Resource: fmt.Sprint(key), Token: token, Highest: uint64(rec)}
	}
	return nil
}

func (g *SQL) checkArgs(key any, token uint64) error {
	if g == nil || g.dialect.valid() != nil {
		return fmt.Errorf("%w: guard not made by NewSQLTable or NewSQLColumn", ErrDialect)
	}
	s, isString := key.(string)
	switch {
	case isString:
		return checkSQLToken(s, token)
	case g.shape == "table" || key == nil:
		return fmt.Errorf("%w: want a string for the token table, got %T", ErrInvalidResource, key)
	}
	return checkSQLToken("-", token)
}

// Check is the guard inside a transaction the caller manages: it refuses
// (a *StaleError, errors.Is ErrStale) when key's recorded token is above
// token, and otherwise records token; the caller then writes in tx and
// commits. The guarantee holds only if tx commits the write together with
// the token, so roll tx back on any error from Check. Call it first in tx,
// before any read (see SQL on snapshots). key is the resource
// name (a string) for a NewSQLTable guard, the protected row's key value
// for a NewSQLColumn guard.
func (g *SQL) Check(ctx context.Context, tx *sql.Tx, key any, token uint64) error {
	return g.check(ctx, key, token, querier{
		exec: func(ctx context.Context, query string, args ...any) error {
			_, err := tx.ExecContext(ctx, query, args...)
			return err
		},
		one: func(ctx context.Context, query string, args ...any) (int64, bool, error) {
			var v int64
			err := tx.QueryRowContext(ctx, query, args...).Scan(&v)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, false, nil
			}
			return v, err == nil, err
		},
	})
}

// Tx runs write in a new transaction on db if key's recorded token is <=
// token, and commits it together with token; see SQL for the guarantee.
// A refused write returns a *StaleError (errors.Is ErrStale) and write is
// not called. An error from write, or from the commit, rolls everything
// back (the token too) and is returned as is. A token of 0 returns
// ErrZeroToken and touches nothing.
func (g *SQL) Tx(ctx context.Context, db *sql.DB, key any, token uint64, write func(*sql.Tx) error) error {
	if err := g.checkArgs(key, token); err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fence: begin: %w", err)
	}
	if err := g.Check(ctx, tx, key, token); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := write(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fence: commit: %w", err)
	}
	return nil
}
