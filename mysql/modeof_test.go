package mysql_test

import (
	"github.com/distlock/distlock"
	"github.com/distlock/distlock/mysql"
)

// modeOf is l's mode, "" when l is not a mysql Locker.
func modeOf(l *distlock.Locker) mysql.Mode {
	var m mysql.Mode
	l.As(&m)
	return m
}
