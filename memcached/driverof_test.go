package memcached

import "github.com/distlock/distlock"

// driverOf is l's driver; l must be a Locker of this backend.
func driverOf(l *distlock.Locker) *driver {
	var d *driver
	if !l.As(&d) {
		panic("not a memcached Locker")
	}
	return d
}

// itemNames is l's item naming.
func itemNames(l *distlock.Locker) Items {
	var it Items
	l.As(&it)
	return it
}
