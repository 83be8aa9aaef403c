package mysql_test

import (
	"github.com/distlock/distlock/internal/testkit/target"
	"github.com/distlock/distlock/mysql"
)

// modeOf is a mysql Locker's mode.
var modeOf = target.Of[mysql.Mode]
