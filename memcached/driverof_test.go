package memcached

import "github.com/distlock/distlock/internal/testkit/target"

// driverOf is a Locker's driver; the Locker must be of this backend.
var driverOf = target.Of[*driver]

// itemNames is a Locker's item naming.
var itemNames = target.Of[Items]
