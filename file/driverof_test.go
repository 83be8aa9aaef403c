package file

import "github.com/distlock/distlock"

// driverOf is l's driver; l must be a Locker of this backend.
func driverOf(l *distlock.Locker) *driver {
	var d *driver
	if !l.As(&d) {
		panic("not a file Locker")
	}
	return d
}

// dirOf is l's lock directory.
func dirOf(l *distlock.Locker) Dir {
	var d Dir
	l.As(&d)
	return d
}
