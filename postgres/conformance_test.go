package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/distlock/distlock/postgres"
)

// closedPortURL is a postgres URL on a loopback port nobody listens on.
func closedPortURL(t testing.TB) string {
	return "postgres://u:p@" + sqltest.ClosedPort(t) + "/db?connect_timeout=2"
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
	"postgres://u:p@127.0.0.1:5432/db?cleanup_interval=-1s",
	"postgres://u:p@127.0.0.1:5432/db?cleanup_batch=0",
	"postgres://u:p@127.0.0.1:5432/db?cleanup_grace=forever",
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
	// lockers are the Lockers of the typed constructor (advisory mode).
	lockers sqltest.Lockers
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

// NewLocker: row mode opens by URL (a new pool each time); advisory uses
// the typed constructor over a new pool, with a keepalive long enough that
// a lock whose session Expire terminated still looks held to its lease, so
// that the stale-holder check reaches the backend's own check (the unlock
// on a dead session) instead of finding the lease already ended.
func (h *harness) NewLocker(ctx context.Context) (*distlock.Locker, error) {
	if h.mode == postgres.ModeRow {
		return distlock.Open(ctx, pgURL(h.srv, h.query))
	}
	pool := openPool(h.t, h.srv, nil)
	return h.lockers.Add(mustNew(h.t, pool, postgres.WithMode(postgres.ModeAdvisory), postgres.WithTable(h.table),
		postgres.WithCreateTable(true), postgres.WithKeepalive(time.Minute))), nil
}

// NewLinkedLocker opens a client whose connections pass through a fault
// proxy.
func (h *harness) NewLinkedLocker(ctx context.Context) (*distlock.Locker, conformance.Link, error) {
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

// Held lists the locks held now, read from the server.
func (h *harness) Held(ctx context.Context) ([]string, error) {
	if h.mode == postgres.ModeRow {
		return heldRows(ctx, h.admin, h.table)
	}
	return heldAdvisory(ctx, h.admin, h.table)
}

// KillAll is a server fault: pg_terminate_backend of every other client
// session.
func (h *harness) KillAll(ctx context.Context) error {
	_, err := h.admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' AND usename = current_user`)
	return err
}

func (h *harness) harness() conformance.Harness {
	sh := sqltest.Harness{
		Name:           "postgres-" + string(h.mode),
		Srv:            h.srv,
		URL:            pgURL(h.srv, h.query),
		BadURLs:        badURLs,
		UnreachableURL: closedPortURL(h.t),
		FencedRedis:    h.fenced,
		FencedPostgres: h.srv.DSN(),
		Client:         h,
		KillAllName:    "pg_terminate_backend every client session",
	}
	if h.mode == postgres.ModeRow {
		sh.ExpireRow = func(ctx context.Context, key string) error { return expireRow(ctx, h.admin, h.table, key) }
		return sh.Conformance()
	}
	// Advisory: a partitioned client (the linked one) loses its session
	// after its idle_session_timeout of 3s. Sessions end by
	// pg_terminate_backend.
	sh.SessionTimeout = 3 * time.Second
	sh.PinnedIDs = func(l *distlock.Locker, key string) []int64 {
		var pids []uint32
		if key == "" {
			pids = postgres.PinnedPIDs(l)
		} else if pid, ok := postgres.PinnedPID(l, key); ok {
			pids = []uint32{pid}
		}
		ids := make([]int64, len(pids))
		for i, pid := range pids {
			ids[i] = int64(pid)
		}
		return ids
	}
	sh.KillSessions = func(ctx context.Context, ids []int64) error {
		pids := make([]uint32, len(ids))
		for i, id := range ids {
			pids[i] = uint32(id)
		}
		return terminate(ctx, h.admin, pids...)
	}
	sh.Lockers = &h.lockers
	return sh.Conformance()
}

// TestConformanceRow and the other modes' suites run at once, each on a
// server of its own (their Alone checks one at a time, see
// conformance.Parallel).
func TestConformanceRow(t *testing.T) {
	t.Parallel()
	conformance.Run(t, newHarness(t, postgres.ModeRow).harness())
}

// TestConformanceRowNotify is row mode with LISTEN/NOTIFY wake-ups
// (notify=true): the notify check then runs too.
func TestConformanceRowNotify(t *testing.T) {
	t.Parallel()
	h := newHarness(t, postgres.ModeRow)
	h.query += "&notify=true"
	ch := h.harness()
	ch.Name = "postgres-row-notify"
	conformance.Run(t, ch)
}

func TestConformanceAdvisory(t *testing.T) {
	t.Parallel()
	conformance.Run(t, newHarness(t, postgres.ModeAdvisory).harness())
}

// expireRow moves a held row's expiry into the past. A row whose holder's
// refresh came too late on a loaded machine has already expired: it is
// moved all the same (the lease is lost either way), not reported unheld.
func expireRow(ctx context.Context, pool *pgxpool.Pool, table, key string) error {
	tag, err := pool.Exec(ctx, `UPDATE "`+table+`" SET expires_at = clock_timestamp() - interval '1 second'
WHERE lock_key = $1 AND cardinality(holds) > 0`, []byte(key))
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("key %q is not held", key)
	}
	return nil
}
