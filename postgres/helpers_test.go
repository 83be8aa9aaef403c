package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/distlock/distlock/postgres"
)

// shared is the PostgreSQL server most tests use (with
// DISTLOCK_POSTGRES_DSN, the external one), started by the first test that
// needs it; tests that kill or restart a server start their own.
var shared = sqltest.Shared[*testserver.Postgres]{
	External: func() bool { return os.Getenv(testserver.EnvPostgresDSN) != "" },
	Start:    func(ctx context.Context) (*testserver.Postgres, error) { return testserver.StartPostgres(ctx, "") },
	Stop:     func(s *testserver.Postgres) error { return s.Stop() },
	PerTest:  testserver.PostgresServer,
	// The modes' three conformance suites and two other parallel tests at once.
	Parallel: 5,
}

func TestMain(m *testing.M) { shared.Main(m) }

// server returns the shared server.
func server(t testing.TB) *testserver.Postgres { return shared.Get(t) }

// ownServer starts a server for a test that kills or restarts it.
func ownServer(t testing.TB) *testserver.Postgres {
	return sqltest.Own(t, testserver.PostgresServer)
}

// pgURL is the distlock URL of srv with extra query parameters (and
// create_table=true).
func pgURL(srv *testserver.Postgres, query string) string {
	u, err := url.Parse(srv.DSN())
	if err != nil {
		panic(err)
	}
	q := u.Query()
	extra, _ := url.ParseQuery(query)
	for k, v := range extra {
		q[k] = v
	}
	if !q.Has("create_table") {
		q.Set("create_table", "true")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// openPool opens a pool for srv (with runtime parameters), closed at the end
// of the test.
func openPool(t testing.TB, srv *testserver.Postgres, params map[string]string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 64 // advisory mode pins one connection per held lock
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

var (
	uniqueTable = sqltest.UniqueTable
	ctxT        = sqltest.Ctx
)

// tracedPool opens a pool for srv whose statements tr counts, closed at the
// end of the test.
func tracedPool(t testing.TB, srv *testserver.Postgres) (*pgxpool.Pool, *countTracer) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	tr := &countTracer{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, tr
}

// countTracer counts the statements a pool sends.
type countTracer struct{ n atomic.Int64 }

func (c *countTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *countTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// queryStrings runs q and returns its single bytea/text column as strings.
func queryStrings(ctx context.Context, pool *pgxpool.Pool, q string, args ...any) ([]string, error) {
	rows, err := pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		out = append(out, string(b))
	}
	return out, rows.Err()
}

// heldRows lists the keys of live leases in a row-mode table.
func heldRows(ctx context.Context, pool *pgxpool.Pool, table string) ([]string, error) {
	return queryStrings(ctx, pool, `SELECT lock_key FROM "`+table+`" WHERE cardinality(holds) > 0 AND expires_at > clock_timestamp()`)
}

// heldAdvisory lists the keys whose advisory locks some session holds.
func heldAdvisory(ctx context.Context, pool *pgxpool.Pool, table string) ([]string, error) {
	return queryStrings(ctx, pool, `SELECT a.lock_key FROM pg_locks p JOIN "`+table+`" a
ON a.lock_id = ((p.classid::bigint << 32) | p.objid::bigint) WHERE p.locktype = 'advisory' AND p.granted AND p.objsubid = 1`)
}

// terminate ends the server sessions pids with pg_terminate_backend and
// waits (up to 10s each) until they are gone.
func terminate(ctx context.Context, pool *pgxpool.Pool, pids ...uint32) error {
	for _, pid := range pids {
		var ok bool
		if err := pool.QueryRow(ctx, "SELECT pg_terminate_backend($1, 10000)", int32(pid)).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("pg_terminate_backend(%d) found no session", pid)
		}
	}
	return nil
}

// mustNew is postgres.New for a test: an error fails it.
func mustNew(t testing.TB, pool *pgxpool.Pool, opts ...postgres.Option) *distlock.Locker {
	t.Helper()
	l, err := postgres.New(pool, opts...)
	if err != nil {
		t.Fatalf("postgres.New: %v", err)
	}
	return l
}
