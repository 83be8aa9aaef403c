package postgres_test

import (
	"github.com/distlock/distlock/internal/testkit/target"
	"github.com/distlock/distlock/postgres"
)

// modeOf is a postgres Locker's mode.
var modeOf = target.Of[postgres.Mode]
