// Package conformance is the suite that proves a distlock backend keeps the
// contract: mutual exclusion, owner-checked release and refresh, expiry,
// reentrancy, fencing, context handling, key and TTL validation, Close, and
// every capability the backend claims.
//
// The checks are plain functions over a Harness, in the manner of
// testing/fstest: Run executes them as subtests of a Go test, and RunChecks
// executes them without package testing (the distlock CLI uses it against a
// user's own servers) and reports a Result per check.
//
// A check that cannot run — a capability the backend does not claim, a fault
// the harness cannot inject — is skipped with the reason.
package conformance

import (
	"context"
	"time"

	"github.com/distlock/distlock"
)

// Harness describes the backend under test.
type Harness struct {
	// Name labels the backend in reports ("redis").
	Name string
	// NewLocker returns a new, independent client of the backend under
	// test — its own connections or session — sharing lock state with
	// every other Locker of the harness. The suite closes it.
	NewLocker func(ctx context.Context) (distlock.Locker, error)
	// KeyPrefix is prepended to every key the suite locks, so a run
	// against shared infrastructure stays apart from other users'.
	KeyPrefix string
	// TTL is the short TTL the expiry checks use: the shortest the
	// backend honours with margin. Default 400ms.
	TTL time.Duration
	// SessionTimeout bounds how long a session-bound backend takes to
	// free the locks of a dead client. Default 30s.
	SessionTimeout time.Duration
	// Faults are optional hooks; checks that need a missing one are
	// skipped with a reason.
	Faults Faults
}

// Faults are the fault-injection hooks a harness may provide.
type Faults struct {
	// KillClient ends l's session as a crash of its process would: no
	// release, no goodbye. The SessionBound check needs it.
	KillClient func(l distlock.Locker) error
	// Expire makes the backend drop the lock named key at once, as if
	// its TTL had run out while the holder was paused or its clock jumped,
	// without the holder learning of it. The stale-holder check needs it:
	// it is the only way to make a holder call Release and Refresh on a
	// lock that another owner holds while its own lease still looks valid,
	// which exercises the backend's owner check rather than distlock's.
	Expire func(ctx context.Context, key string) error
	// RestartBackend restarts the backend's server(s), keeping their data
	// as a real restart would. The Durable check needs it. It returns when
	// the backend serves again.
	RestartBackend func(ctx context.Context) error
}

func (h *Harness) ttl() time.Duration {
	if h.TTL > 0 {
		return h.TTL
	}
	return 400 * time.Millisecond
}

func (h *Harness) sessionTimeout() time.Duration {
	if h.SessionTimeout > 0 {
		return h.SessionTimeout
	}
	return 30 * time.Second
}
