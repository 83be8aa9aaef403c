package postgres_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/netfault"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/postgres"
)

// restart is the RestartBackend fault: kill -9 and start again on the same
// data directory.
func restart(srv *testserver.Postgres) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := srv.Kill(); err != nil {
			return err
		}
		return srv.Restart(ctx)
	}
}

// closedPortURL is a postgres URL on a loopback port nobody listens on.
func closedPortURL(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "postgres://u:p@" + addr + "/db?connect_timeout=2"
}

// badURLs are malformed postgres URLs: each must get ErrInvalidOption.
var badURLs = []string{
	"postgres://u:p@127.0.0.1:5432/db?mode=bogus",
	"postgres://u:p@127.0.0.1:5432/db?table=a;drop%20table%20x",
	"postgres://u:p@127.0.0.1:5432/db?table=%22x%22",
	"postgres://u:p@127.0.0.1:5432/db?table=",
	"postgres://u:p@127.0.0.1:5432/db?table=a.b.c",
	"postgres://u:p@127.0.0.1:5432/db?table=Upper",
	"postgres://u:p@127.0.0.1:5432/db?table=x%27%3B--",
	"postgres://u:p@127.0.0.1:5432/db?keepalive=-1s",
	"postgres://u:p@127.0.0.1:5432/db?keepalive=often",
	"postgres://u:p@127.0.0.1:5432/db?keepalive=1000h",
	"postgres://u:p@127.0.0.1:5432/db?pool_max_conns=0",
	"postgres://u:p@127.0.0.1:5432/db?pool_max_conns=99999999999999999999",
	"postgres://u:p@127.0.0.1:5432/db?pool_max_conns=-3",
	"postgres://u:p@127.0.0.1:5432/db?session_timeout=500ms",
	"postgres://u:p@127.0.0.1:5432/db?session_timeout=1000h",
	"postgres://u:p@127.0.0.1:5432/db?session_timeout=1.0000001s",
	"postgres://u:p@127.0.0.1:5432/db?connect_timeout=0",
	"postgres://u:p@127.0.0.1:5432/db?connect_timeout=1e9",
	"postgres://u:p@127.0.0.1:5432/db?create_table=maybe",
	"postgres://u:p@127.0.0.1:5432/db?sslmode=bogus",
	"postgres://u:p@127.0.0.1:5432/db?password=secret",
	"postgres://u:p@127.0.0.1:5432/db?mode=row&mode=advisory",
	"postgres://u:p@127.0.0.1:5432/db?a=%zz",
	"postgres://u:p@127.0.0.1:5432",
	"postgres://u:p@127.0.0.1:5432/",
	"postgres://u:p@127.0.0.1:5432/db/extra",
	"postgres://u:p@h1:5432,h2:5432/db",
	"postgres://u:p@127.0.0.1:0/db",
	"postgres://u:p@127.0.0.1:99999999/db",
	"postgresql:opaque",
	"postgres:///db",
}

// harness is the conformance harness shared by both modes.
type harness struct {
	t     *testing.T
	srv   *testserver.Postgres
	admin *pgxpool.Pool
	table string
	mode  postgres.Mode
	query string // URL query for this mode
	mu    sync.Mutex
	locks []*postgres.Locker
	// fenced is a Redis address for the fenced-resource check.
	fenced string
}

func newHarness(t *testing.T, mode postgres.Mode) *harness {
	srv := ownServer(t)
	h := &harness{t: t, srv: srv, admin: openPool(t, srv, nil), mode: mode, table: uniqueTable("conf_" + string(mode))}
	h.query = "mode=" + string(mode) + "&table=" + h.table
	if mode == postgres.ModeAdvisory {
		// A short idle_session_timeout (session_timeout) lets the server
		// end the session of a holder frozen by the pause-holder check,
		// and of the client behind a fault proxy in the
		// partitioned-holder check; the holder's lease (Deadliner)
		// reports the loss as soon as it is looked at after the resume,
		// before the server can have freed the lock.
		h.query += "&keepalive=500ms&session_timeout=3s"
	}
	h.fenced = testserver.Redis(t, testserver.RedisConfig{}).Addr()
	return h
}

// newLocker: row mode opens by URL (a new pool each time); advisory uses
// the typed constructor over a new pool, with a keepalive long enough that
// a lock whose session Expire terminated still looks held to its lease, so
// that the stale-holder check reaches the backend's own check (the unlock
// on a dead session) instead of finding the lease already ended.
func (h *harness) newLocker(ctx context.Context) (distlock.Locker, error) {
	if h.mode == postgres.ModeRow {
		return distlock.Open(ctx, pgURL(h.srv, h.query))
	}
	pool := openPool(h.t, h.srv, nil)
	l := mustNew(h.t, pool, postgres.WithMode(postgres.ModeAdvisory), postgres.WithTable(h.table),
		postgres.WithCreateTable(true), postgres.WithKeepalive(time.Minute))
	h.mu.Lock()
	h.locks = append(h.locks, l)
	h.mu.Unlock()
	return l, nil
}

// newLinkedLocker opens a client whose connections pass through a fault
// proxy.
func (h *harness) newLinkedLocker(ctx context.Context) (distlock.Locker, conformance.Link, error) {
	p, err := netfault.Listen(h.srv.Addr())
	if err != nil {
		return nil, nil, err
	}
	h.t.Cleanup(func() { _ = p.Close() })
	u, err := url.Parse(pgURL(h.srv, h.query))
	if err != nil {
		return nil, nil, err
	}
	u.Host = p.Addr()
	l, err := distlock.Open(ctx, u.String())
	if err != nil {
		return nil, nil, err
	}
	return l, p, nil
}

// held lists the locks held now, read from the server.
func (h *harness) held(ctx context.Context) ([]string, error) {
	if h.mode == postgres.ModeRow {
		return heldRows(ctx, h.admin, h.table)
	}
	return heldAdvisory(ctx, h.admin, h.table)
}

// killAll is a server fault: pg_terminate_backend of every other client
// session.
func (h *harness) killAll(ctx context.Context) (func(context.Context) error, error) {
	_, err := h.admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' AND usename = current_user`)
	return func(context.Context) error { return nil }, err
}

func (h *harness) harness() conformance.Harness {
	srv := h.srv
	ch := conformance.Harness{
		Name:           "postgres-" + string(h.mode),
		NewLocker:      h.newLocker,
		URL:            pgURL(srv, h.query),
		FencedRedis:    h.fenced,
		UnreachableURL: closedPortURL(h.t),
		BadURLs:        badURLs,
		Faults: conformance.Faults{
			NewLinkedLocker: h.newLinkedLocker,
			StopBackend:     func(context.Context) error { return srv.Kill() },
			StartBackend:    srv.Restart,
			RestartBackend:  restart(srv),
			Held:            h.held,
			ServerFaults: []conformance.ServerFault{
				{Name: "kill -9 and restart", Inject: func(context.Context) (func(context.Context) error, error) {
					return srv.Restart, srv.Kill()
				}},
				{Name: "SIGSTOP 3s", Inject: func(context.Context) (func(context.Context) error, error) {
					return func(context.Context) error { return srv.Resume() }, srv.Pause()
				}},
				{Name: "pg_terminate_backend every client session", Inject: h.killAll},
			},
		},
	}
	if h.mode == postgres.ModeRow {
		ch.TTL = 500 * time.Millisecond
		ch.BadTTLs = []time.Duration{time.Nanosecond, 999 * time.Nanosecond, time.Microsecond, time.Millisecond}
		// Expire moves the row's expiry into the past, bypassing the
		// owner check; the holder is not told.
		ch.Faults.Expire = func(ctx context.Context, key string) error { return expireRow(ctx, h.admin, h.table, key) }
		return ch
	}
	// Advisory: a dead client's connection closes with its process, and
	// the server ends the session at once; a partitioned one (the linked
	// client) loses its session after its idle_session_timeout of 3s.
	ch.SessionTimeout = 3 * time.Second
	killPinned := func(ctx context.Context, l *postgres.Locker, key string) error {
		pids := postgres.PinnedPIDs(l)
		if key != "" {
			pid, ok := postgres.PinnedPID(l, key)
			if !ok {
				return fmt.Errorf("key %q is not held", key)
			}
			pids = []uint32{pid}
		}
		if len(pids) == 0 {
			return fmt.Errorf("the locker holds no lock")
		}
		return terminate(ctx, h.admin, pids...)
	}
	ch.Faults.KillClient = func(l distlock.Locker) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return killPinned(ctx, l.(*postgres.Locker), "")
	}
	// Expire: an advisory lock can only be dropped by ending its session,
	// so terminate it; the long keepalive of the harness's lockers keeps
	// the holder from noticing before the check calls Release and Refresh.
	ch.Faults.Expire = func(ctx context.Context, key string) error {
		h.mu.Lock()
		locks := slices.Clone(h.locks)
		h.mu.Unlock()
		for _, l := range locks {
			if _, ok := postgres.PinnedPID(l, key); ok {
				return killPinned(ctx, l, key)
			}
		}
		return fmt.Errorf("key %q is not held", key)
	}
	return ch
}

func TestConformanceRow(t *testing.T) {
	conformance.Run(t, newHarness(t, postgres.ModeRow).harness())
}

// TestConformanceRowNotify is row mode with LISTEN/NOTIFY wake-ups
// (notify=true): the notify check then runs too.
func TestConformanceRowNotify(t *testing.T) {
	h := newHarness(t, postgres.ModeRow)
	h.query += "&notify=true"
	ch := h.harness()
	ch.Name = "postgres-row-notify"
	conformance.Run(t, ch)
}

func TestConformanceAdvisory(t *testing.T) {
	conformance.Run(t, newHarness(t, postgres.ModeAdvisory).harness())
}

func expireRow(ctx context.Context, pool *pgxpool.Pool, table, key string) error {
	tag, err := pool.Exec(ctx, `UPDATE "`+table+`" SET expires_at = clock_timestamp() - interval '1 second'
WHERE lock_key = $1 AND cardinality(holds) > 0 AND expires_at > clock_timestamp()`, []byte(key))
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("key %q is not held", key)
	}
	return nil
}
