package mysql

import "github.com/distlock/distlock"

// driverOf is l's driver; l must be a Locker of this backend.
func driverOf(l *distlock.Locker) modeDriver {
	var d modeDriver
	if !l.As(&d) {
		panic("not a mysql Locker")
	}
	return d
}
