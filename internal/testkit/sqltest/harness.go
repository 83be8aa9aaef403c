package sqltest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
)

// Server is a database server the fault checks can kill, pause and
// restart (a testserver.MariaDB or Postgres).
type Server interface {
	Kill() error
	Restart(ctx context.Context) error
	Pause() error
	Resume() error
}

// Harness describes one SQL backend in one mode for the conformance suite.
type Harness struct {
	Name           string
	Srv            Server
	URL            string
	BadURLs        []string
	UnreachableURL string
	FencedRedis    string
	// FencedPostgres: a PostgreSQL URL the pause-holder check may also
	// write to through fence.SQL (conformance.Harness.FencedPostgres).
	FencedPostgres string
	Client         Client
	// KillAllName names Client.KillAll in reports.
	KillAllName string

	// Row mode: ExpireRow moves a held row's expiry into the past,
	// bypassing the owner check; the holder is not told.
	ExpireRow func(ctx context.Context, key string) error

	// Pinned mode (no ExpireRow): a dead client's connection closes with
	// its process and the server frees its locks at once; a partitioned
	// one loses its session after SessionTimeout.
	SessionTimeout time.Duration
	// PinnedIDs lists the session ids of l's held locks of key (every
	// held lock when key is ""); KillSessions ends those sessions.
	PinnedIDs    func(l *distlock.Locker, key string) []int64
	KillSessions func(ctx context.Context, ids []int64) error
	// Lockers are the Lockers NewLocker made, for Expire.
	Lockers *Lockers
}

// Client is a test's client of the backend in one mode.
type Client interface {
	// NewLocker returns a new, independent Locker.
	NewLocker(ctx context.Context) (*distlock.Locker, error)
	// NewLinkedLocker returns a Locker whose connections pass through a
	// fault proxy.
	NewLinkedLocker(ctx context.Context) (*distlock.Locker, conformance.Link, error)
	// Held lists the locks held now, read from the server.
	Held(ctx context.Context) ([]string, error)
	// KillAll ends every client session.
	KillAll(ctx context.Context) error
}

// Lockers records the Lockers a harness made.
type Lockers struct {
	mu sync.Mutex
	ls []*distlock.Locker
}

// Add records l and returns it.
func (r *Lockers) Add(l *distlock.Locker) *distlock.Locker {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ls = append(r.ls, l)
	return l
}

func (r *Lockers) all() []*distlock.Locker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ls)
}

// Restart is the RestartBackend fault: kill -9 and start again on the same
// data directory.
func Restart(srv Server) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := srv.Kill(); err != nil {
			return err
		}
		return srv.Restart(ctx)
	}
}

// Conformance returns the conformance.Harness of h.
func (h Harness) Conformance() conformance.Harness {
	srv := h.Srv
	ch := conformance.Harness{
		Name:           h.Name,
		NewLocker:      h.Client.NewLocker,
		URL:            h.URL,
		FencedRedis:    h.FencedRedis,
		FencedPostgres: h.FencedPostgres,
		UnreachableURL: h.UnreachableURL,
		BadURLs:        h.BadURLs,
		Faults: conformance.Faults{
			NewLinkedLocker: h.Client.NewLinkedLocker,
			StopBackend:     func(context.Context) error { return srv.Kill() },
			StartBackend:    srv.Restart,
			RestartBackend:  Restart(srv),
			Held:            h.Client.Held,
			ServerFaults: []conformance.ServerFault{
				{Name: "kill -9 and restart", Inject: func(context.Context) (func(context.Context) error, error) {
					return srv.Restart, srv.Kill()
				}},
				{Name: "SIGSTOP 3s", Inject: func(context.Context) (func(context.Context) error, error) {
					return func(context.Context) error { return srv.Resume() }, srv.Pause()
				}},
				{Name: h.KillAllName, Inject: func(ctx context.Context) (func(context.Context) error, error) {
					return func(context.Context) error { return nil }, h.Client.KillAll(ctx)
				}},
			},
		},
	}
	if h.ExpireRow != nil {
		ch.TTL = 500 * time.Millisecond
		ch.BadTTLs = []time.Duration{time.Nanosecond, 999 * time.Nanosecond, time.Microsecond, time.Millisecond}
		ch.Faults.Expire = h.ExpireRow
		return ch
	}
	ch.SessionTimeout = h.SessionTimeout
	killPinned := func(ctx context.Context, l *distlock.Locker, key string) error {
		ids := h.PinnedIDs(l, key)
		if len(ids) == 0 {
			if key != "" {
				return fmt.Errorf("key %q is not held", key)
			}
			return fmt.Errorf("the locker holds no lock")
		}
		if key != "" {
			ids = ids[:1]
		}
		return h.KillSessions(ctx, ids)
	}
	// KillClient: end the victim's pinned sessions from an admin
	// connection.
	ch.Faults.KillClient = func(l *distlock.Locker) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return killPinned(ctx, l, "")
	}
	// Expire: a pinned lock can only be dropped by ending its session;
	// the long keepalive of the harness's Lockers keeps the holder from
	// noticing before the check calls Release and Refresh.
	ch.Faults.Expire = func(ctx context.Context, key string) error {
		for _, l := range h.Lockers.all() {
			if len(h.PinnedIDs(l, key)) > 0 {
				return killPinned(ctx, l, key)
			}
		}
		return fmt.Errorf("key %q is not held", key)
	}
	return ch
}
