package file

import "github.com/distlock/distlock/internal/testkit/target"

// driverOf is a Locker's driver; the Locker must be of this backend.
var driverOf = target.Of[*driver]

// dirOf is a Locker's lock directory.
var dirOf = target.Of[Dir]
