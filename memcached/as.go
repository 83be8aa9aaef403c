package memcached

import (
	"fmt"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock/backend"
)

// Items names the memcached items of a Locker's locks, for inspection with
// other tools. A *Items target of (*distlock.Locker).As gets the Locker's.
type Items struct{ prefix string }

// Key returns the memcached key under which the Locker stores the lock
// named key.
func (it Items) Key(key string) string { return ItemKey(it.prefix, key) }

// As answers (*distlock.Locker).As: **memcache.Client gets the client,
// *Items the item naming.
func (d *driver) As(target any) bool {
	switch t := target.(type) {
	case **driver: // for this package's tests
		*t = d
	case **memcache.Client:
		*t = d.c
	case *Items:
		*t = Items{d.prefix}
	default:
		return false
	}
	return true
}

var _ backend.Permitter = (*driver)(nil)

// PermitCapabilities implements backend.Permitter: memcached has no
// semaphores, and the error says why.
func (d *driver) PermitCapabilities() (backend.Capabilities, error) {
	return backend.Capabilities{}, fmt.Errorf("%w: the memcached backend has no semaphores: memcached has no atomic operation over a set of holders (no scripts, no sorted sets): CAS on one item listing the holders would lose a crashed holder's permit for good or over-issue under contention", backend.ErrInvalidOption)
}
