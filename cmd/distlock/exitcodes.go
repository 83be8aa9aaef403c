package main

import (
	"sort"

	"github.com/distlock/distlock/backend"
)

// Exit statuses. Those of run that are not the command's own follow
// sysexits.h, so they stay clear of the statuses commands commonly use.
const (
	ExitOK = 0
	// ExitFailed: conformance found a failing check.
	ExitFailed = 1
	// ExitUsage: bad flags or arguments (EX_USAGE).
	ExitUsage = 64
	// ExitUnavailable: the backend could not be reached (EX_UNAVAILABLE).
	ExitUnavailable = 69
	// ExitInternal: an unexpected error (EX_SOFTWARE).
	ExitInternal = 70
	// ExitNotAcquired: run could not take the lock in time (EX_TEMPFAIL),
	// like flock -w.
	ExitNotAcquired = 75
	// ExitLost: the lock was lost while the command ran; the command was
	// sent SIGTERM, then SIGKILL after the grace period.
	ExitLost = 76
	// ExitAuth: the backend refused the credentials or a permission
	// (EX_NOPERM): fix the URL's user and password or the server's ACL.
	ExitAuth = 77
	// ExitConfig: a malformed backend URL, key, TTL or option, an
	// operation the backend cannot do, or a backend not set up for
	// distlock: a missing database or lock table (EX_CONFIG).
	ExitConfig = 78
	// ExitInterrupted: conformance was interrupted (SIGINT: 128+2).
	ExitInterrupted = 130
)

func schemes() []string {
	s := backend.Schemes()
	sort.Strings(s)
	return s
}
