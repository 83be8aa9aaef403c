package redis

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/distlock/distlock/internal/redislua"
)

// keyCacheSize is the number of slots of a keyCache: a Locker that cycles
// through at most this many lock names (give or take collisions) finds
// each one's keys there.
const keyCacheSize = 256

// keyCache remembers the keys (redislua.KeysFor: a SHA-256 and one
// allocation each) of lock names recently acquired, so that acquiring a
// name again does not derive them again. It is direct-mapped: a name has
// one slot, chosen by a seeded hash, and a newer name of the same slot
// replaces the older. Each slot points at the keys of a lock the driver
// granted (lock.keys, never written after the lock is made), so
// remembering allocates nothing; a slot keeps that lock's memory alive
// until it is replaced. Safe for concurrent use.
type keyCache struct {
	seed  maphash.Seed
	slots [keyCacheSize]atomic.Pointer[redislua.Keys]
}

func (c *keyCache) slot(name string) *atomic.Pointer[redislua.Keys] {
	return &c.slots[maphash.String(c.seed, name)%keyCacheSize]
}

// get returns the keys remembered for name, if any.
func (c *keyCache) get(name string) (redislua.Keys, bool) {
	if k := c.slot(name).Load(); k != nil && k.Name == name {
		return *k, true
	}
	return redislua.Keys{}, false
}

// put remembers k, which must not change afterwards, for k.Name.
func (c *keyCache) put(k *redislua.Keys) { c.slot(k.Name).Store(k) }
