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
	NewLocker func(ctx context.Context) (*distlock.Locker, error)
	// KeyPrefix is prepended to every key the suite locks, so a run
	// against shared infrastructure stays apart from other users'.
	KeyPrefix string
	// TTL is the short TTL the expiry checks use: the shortest the
	// backend honours with margin. Default 400ms.
	TTL time.Duration
	// SessionTimeout bounds how long a session-bound backend takes to
	// free the locks of a dead client. Default 30s.
	SessionTimeout time.Duration
	// URL opens the backend under test from another process: the checks
	// with worker processes (pauses, crashes, cross-process exclusion)
	// need it, and the test binary must call ServeWorker.
	URL string
	// FencedRedis is the address of a Redis server the suite may use as a
	// fenced resource (a store that refuses stale tokens), to show what
	// fencing buys when a paused holder wakes up.
	FencedRedis string
	// FencedPostgres is the URL of a PostgreSQL database
	// (postgres://user:pass@host:5432/db) the suite may use as a second
	// fenced resource: a table guarded by fence.SQL (it creates two small
	// tables, distlock_conformance_fence and distlock_conformance_fenced).
	FencedPostgres string
	// UnreachableURL points at a backend that does not answer (a closed
	// loopback port); the bad-input check expects ErrUnavailable from it.
	UnreachableURL string
	// BadURLs are malformed URLs for this backend that Open must refuse
	// with ErrInvalidOption.
	BadURLs []string
	// BadTTLs are positive TTLs below this backend's resolution, which
	// must get ErrInvalidTTL.
	BadTTLs []time.Duration
	// Faults are optional hooks; checks that need a missing one are
	// skipped with a reason.
	Faults Faults
}

// Link is the network path between one client and the backend.
type Link interface {
	SetLatency(d time.Duration) // delay each direction by d
	Blackhole()                 // drop everything silently (a partition)
	Cut()                       // reset connections, refuse new ones
	Heal()                      // back to normal
}

// DirectedLink is a Link that can also fault one direction of the traffic,
// and one connection at a time. The checks that delay only the requests of
// an acquisition, or silence one connection one way, need the Link from
// Faults.NewLinkedLocker to implement it, and are skipped otherwise.
// internal/testkit/netfault's Proxy and Group implement it.
type DirectedLink interface {
	Link
	// DelayRequests holds everything the client sends from now on for d
	// before it reaches the backend; replies pass as before. Bytes
	// already held keep their delay through Heal, as bytes already in the
	// network would.
	DelayRequests(d time.Duration)
	// Conns reports how many connections the client has open.
	Conns() int
	// SilenceRequests holds, until Heal, what the client sends on its
	// i-th open connection (from 0); false if there is none.
	SilenceRequests(i int) bool
	// SilenceReplies holds, until Heal, what the backend sends on the
	// client's i-th open connection; false if there is none.
	SilenceReplies(i int) bool
}

// ServerFault is a backend-specific fault that the server-faults check
// injects while worker processes contend for a lock.
type ServerFault struct {
	Name string
	// Inject breaks something and returns how to repair it.
	Inject func(ctx context.Context) (heal func(ctx context.Context) error, err error)
}

// Faults are the fault-injection hooks a harness may provide.
type Faults struct {
	// KillClient ends l's session as a crash of its process would: no
	// release, no goodbye. The SessionBound check needs it.
	KillClient func(l *distlock.Locker) error
	// Expire makes the backend drop the lock named key at once, as if
	// its TTL had run out while the holder was paused or its clock jumped,
	// without the holder learning of it. The stale-holder check needs it:
	// it is the only way to make a holder call Release and Refresh on a
	// lock that another owner holds while its own lease still looks valid,
	// which exercises the backend's owner check rather than distlock's.
	Expire func(ctx context.Context, key string) error
	// NewLinkedLocker returns a new client whose every connection to the
	// backend passes through the returned Link. The network-fault checks
	// need it. If the Link is an io.Closer it is closed after the Locker.
	NewLinkedLocker func(ctx context.Context) (*distlock.Locker, Link, error)
	// StopBackend kills every server of the backend; StartBackend starts
	// them again with their data. The backend-down check needs both.
	StopBackend, StartBackend func(ctx context.Context) error
	// Held lists the locks held in the backend right now, read from the
	// server directly (keys, nodes, rows; not fencing counters or empty
	// parents). The cancel-in-flight check uses it, when every lock of the
	// suite has been released, to prove nothing was left behind.
	Held func(ctx context.Context) ([]string, error)
	// ServerFaults are injected under load by the server-faults check.
	ServerFaults []ServerFault
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
