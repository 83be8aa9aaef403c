package fence_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// stops are the shared servers' Stop calls, run after the tests.
var (
	stopsMu sync.Mutex
	stops   []func() error
)

func stopLater(f func() error) {
	stopsMu.Lock()
	stops = append(stops, f)
	stopsMu.Unlock()
}

var mariadb = sqltest.Shared[*testserver.MariaDB]{
	External: func() bool { return os.Getenv(testserver.EnvMySQLDSN) != "" },
	Start: func(ctx context.Context) (*testserver.MariaDB, error) {
		s, err := testserver.StartMariaDB(ctx, "")
		if err == nil {
			stopLater(s.Stop)
		}
		return s, err
	},
	PerTest: testserver.MariaDBServer,
}

var postgres = sqltest.Shared[*testserver.Postgres]{
	External: func() bool { return os.Getenv(testserver.EnvPostgresDSN) != "" },
	Start: func(ctx context.Context) (*testserver.Postgres, error) {
		s, err := testserver.StartPostgres(ctx, "")
		if err == nil {
			stopLater(s.Stop)
		}
		return s, err
	},
	PerTest: testserver.PostgresServer,
}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(pausedChild())
	}
	code := m.Run()
	for _, stop := range stops {
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop a shared server:", err)
		}
	}
	os.Exit(code)
}

func ctxT(t testing.TB) context.Context { return sqltest.Ctx(t, 2*time.Minute) }

// mysqlDB is a database/sql pool on the shared MariaDB.
func mysqlDB(t testing.TB) *sql.DB {
	t.Helper()
	cfg, err := gomysql.ParseDSN(mariadb.Get(t).DSN())
	require.NoError(t, err)
	cfg.InterpolateParams = true // one round trip per statement, as the mysql backend runs it
	c, err := gomysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(c)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// pgPool is a pgx pool on the shared PostgreSQL.
func pgPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), postgres.Get(t).DSN())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// pgDB is a database/sql pool (pgx's stdlib driver) on the shared PostgreSQL.
func pgDB(t testing.TB) *sql.DB {
	t.Helper()
	p := pgPool(t)
	db := stdlib.OpenDBFromPool(p)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// redisClient is a client of a Redis started for the test.
func redisClient(t testing.TB) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: testserver.Redis(t, testserver.RedisConfig{}).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
