package postgres

import "github.com/jackc/pgx/v5/pgxpool"

// As answers (*distlock.Locker).As: *Mode gets the Locker's mechanism,
// **pgxpool.Pool its pool.
func (d *rowDriver) As(target any) bool { return as(d, target) }

// As answers (*distlock.Locker).As, as rowDriver's does.
func (d *advDriver) As(target any) bool { return as(d, target) }

func as(d modeDriver, target any) bool {
	b := d.common()
	switch t := target.(type) {
	case *Mode:
		*t = Mode(b.Mode)
	case **pgxpool.Pool:
		*t = b.pool
	case *modeDriver: // for this package's tests
		*t = d
	default:
		return false
	}
	return true
}

// As answers (*distlock.Locker).As, as rowDriver's does, with the
// notifying driver itself for this package's tests.
func (d notifyRowDriver) As(target any) bool { return as(d, target) }
