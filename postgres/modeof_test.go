package postgres_test

import (
	"github.com/distlock/distlock"
	"github.com/distlock/distlock/postgres"
)

// modeOf is l's mode, "" when l is not a postgres Locker.
func modeOf(l *distlock.Locker) postgres.Mode {
	var m postgres.Mode
	l.As(&m)
	return m
}
