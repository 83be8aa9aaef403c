package mysql

import (
	"database/sql"

	"github.com/jmoiron/sqlx"
)

// As answers (*distlock.Locker).As: *Mode gets the Locker's mechanism,
// **sql.DB its database, and **sqlx.DB the *sqlx.DB it was made from with
// NewSqlx (false for a Locker made by New or opened by URL).
func (d *rowDriver) As(target any) bool { return as(d, target) }

// As answers (*distlock.Locker).As, as rowDriver's does.
func (d *fuDriver) As(target any) bool { return as(d, target) }

func as(d modeDriver, target any) bool {
	b := d.common()
	switch t := target.(type) {
	case *Mode:
		*t = Mode(b.Mode)
	case **sql.DB:
		*t = b.db
	case **sqlx.DB:
		if b.given == nil {
			return false
		}
		*t = b.given
	case *modeDriver: // for this package's tests
		*t = d
	default:
		return false
	}
	return true
}
