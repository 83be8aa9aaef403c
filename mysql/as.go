package mysql

import "database/sql"

// As answers (*distlock.Locker).As: *Mode gets the Locker's mechanism,
// **sql.DB its database.
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
	case *modeDriver: // for this package's tests
		*t = d
	default:
		return false
	}
	return true
}
