package mysql

import (
	"database/sql"
	"fmt"

	"github.com/jmoiron/sqlx"
	"github.com/jmoiron/sqlx/reflectx"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

// NewSqlx is New over the pool of a *sqlx.DB (its DB field): the same
// statements, the same ownership (Close leaves db open) and the same
// checks, and a nil db, or one without a *sql.DB, gets an error wrapping
// distlock.ErrInvalidOption. The Locker's As answers **sqlx.DB with db
// itself, and **sql.DB with db.DB. db's Mapper and Unsafe setting do not
// change how the Locker reads its own rows.
func NewSqlx(db *sqlx.DB, opts ...Option) (*distlock.Locker, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if db == nil || db.DB == nil {
		return nil, fmt.Errorf("%w: mysql: NewSqlx: nil *sqlx.DB", backend.ErrInvalidOption)
	}
	d := newDriver(db.DB, nil, c)
	d.common().given = db
	return distlock.New(d, "mysql", c.Defaults...), nil
}

// columns maps the Locker's row structs by their db tags alone: neither a
// user's sqlx.NameMapper nor a *sqlx.DB's Mapper reaches it.
var columns = reflectx.NewMapper("db")

// rowReader is db for sqlx's GetContext and SelectContext (the operator
// calls and the cleanup); the hot path uses db directly.
func rowReader(db *sql.DB) *sqlx.DB {
	x := sqlx.NewDb(db, "mysql")
	x.Mapper = columns
	return x
}
