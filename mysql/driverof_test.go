package mysql

import "github.com/distlock/distlock/internal/testkit/target"

// driverOf is a Locker's driver; the Locker must be of this backend.
var driverOf = target.Of[modeDriver]
