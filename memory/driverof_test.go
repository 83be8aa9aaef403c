package memory

import "github.com/distlock/distlock"

// driverOf is l's driver; l must be a Locker of this backend.
func driverOf(l *distlock.Locker) *driver {
	var d *driver
	if !l.As(&d) {
		panic("not a memory Locker")
	}
	return d
}
