package etcd

import "github.com/distlock/distlock/internal/testkit/target"

// driverOf is a Locker's driver; the Locker must be of this backend.
var driverOf = target.Of[*driver]

// sessionOf is a Locker's session.
var sessionOf = target.Of[Session]
