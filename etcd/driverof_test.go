package etcd

import "github.com/distlock/distlock"

// driverOf is l's driver; l must be a Locker of this backend.
func driverOf(l *distlock.Locker) *driver {
	var d *driver
	if !l.As(&d) {
		panic("not a etcd Locker")
	}
	return d
}

// sessionOf is l's etcd session.
func sessionOf(l *distlock.Locker) Session {
	var s Session
	l.As(&s)
	return s
}
