package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/redislua"
)

// The resources the fault checks write to, each behind a guard of package
// fence, the guards users get: the published fault matrix shows a paused
// holder's write refused by the real helper, on Redis and on PostgreSQL.

// fencedStore is one fenced resource.
type fencedStore interface {
	// write records writer in the resource with token; a token older
	// than the highest accepted gets an error wrapping fence.ErrStale.
	write(ctx context.Context, token uint64, writer string) error
	// writer returns the last writer accepted.
	writer(ctx context.Context) (string, error)
	name() string
	close()
}

// openFencedStores opens the resources configured (a Redis address, a
// PostgreSQL URL) for the lock named key. The caller closes them.
func openFencedStores(ctx context.Context, redisAddr, postgresURL, key string) ([]fencedStore, error) {
	var stores []fencedStore
	if redisAddr != "" {
		o, err := fencedRedisOptions(redisAddr)
		if err != nil {
			return nil, err
		}
		c := goredis.NewClient(o)
		stores = append(stores, &fencedRedis{c: c, guard: fence.NewRedis(c), res: key, data: "distlock:conformance:fenced:" + key})
	}
	if postgresURL != "" {
		s, err := openFencedPostgres(ctx, postgresURL, key)
		if err != nil {
			closeStores(stores)
			return nil, err
		}
		stores = append(stores, s)
	}
	return stores, nil
}

func closeStores(stores []fencedStore) {
	for _, s := range stores {
		s.close()
	}
}

// fencedRedis is a Redis hash behind fence.Redis.
type fencedRedis struct {
	c     *goredis.Client
	guard *fence.Redis
	res   string // the guard's resource: the lock key
	data  string // the hash written
}

func (r *fencedRedis) write(ctx context.Context, token uint64, writer string) error {
	_, err := r.guard.HSet(ctx, r.res, token, r.data, "writer", writer)
	return err
}

func (r *fencedRedis) writer(ctx context.Context) (string, error) {
	return r.c.HGet(ctx, r.data, "writer").Result()
}

func (r *fencedRedis) name() string { return "redis (fence.Redis)" }
func (r *fencedRedis) close()       { _ = r.c.Close() }

// fencedPostgres is a row of a PostgreSQL table behind fence.SQL (the
// per-resource token table shape).
type fencedPostgres struct {
	pool  *pgxpool.Pool
	guard *fence.SQL
	res   string
}

const fencedDataDDL = `CREATE TABLE IF NOT EXISTS distlock_conformance_fenced (resource text PRIMARY KEY, writer text NOT NULL)`

func openFencedPostgres(ctx context.Context, url, key string) (*fencedPostgres, error) {
	guard, err := fence.NewSQLTable(fence.Postgres, "distlock_conformance_fence")
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("fenced PostgreSQL store: %w", err)
	}
	for _, ddl := range []string{guard.DDL(), fencedDataDDL} {
		if _, err := pool.Exec(ctx, ddl); err != nil && !isDuplicateDDL(err) {
			pool.Close()
			return nil, fmt.Errorf("fenced PostgreSQL store: %w", err)
		}
	}
	return &fencedPostgres{pool: pool, guard: guard, res: key}, nil
}

// isDuplicateDDL: two checks creating the tables at once may collide on
// the catalog (CREATE TABLE IF NOT EXISTS is not atomic in PostgreSQL).
func isDuplicateDDL(err error) bool {
	var pe interface{ SQLState() string }
	return errors.As(err, &pe) && (pe.SQLState() == "23505" || pe.SQLState() == "42P07")
}

func (p *fencedPostgres) write(ctx context.Context, token uint64, writer string) error {
	return p.guard.TxPgx(ctx, p.pool, p.res, token, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO distlock_conformance_fenced (resource, writer) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET writer = EXCLUDED.writer`, p.res, writer)
		return err
	})
}

func (p *fencedPostgres) writer(ctx context.Context) (string, error) {
	var w string
	err := p.pool.QueryRow(ctx, `SELECT writer FROM distlock_conformance_fenced WHERE resource = $1`, p.res).Scan(&w)
	return w, err
}

func (p *fencedPostgres) name() string { return "postgres (fence.SQL)" }
func (p *fencedPostgres) close()       { p.pool.Close() }

// fencedRedisOptions reads a fenced Redis given as host:port or as a URL
// of the forms --backend takes (redis://[user:password@]host:port/db,
// rediss://…), so that a password can be given.
func fencedRedisOptions(addr string) (*goredis.Options, error) {
	if !strings.Contains(addr, "://") {
		if strings.ContainsAny(addr, "@/") {
			return nil, fmt.Errorf("%w: fenced Redis %q: want host:port or redis://[:password@]host:port/db", backend.ErrInvalidOption, backend.RedactURL(addr))
		}
		return &goredis.Options{Addr: addr}, nil
	}
	o, err := goredis.ParseURL(addr)
	if err != nil {
		return nil, backend.ScrubError(addr, fmt.Errorf("%w: fenced Redis %q: %w", backend.ErrInvalidOption, backend.RedactURL(addr), err))
	}
	return o, nil
}

// CheckFenced connects to the fenced resources a run will write to (a
// Redis as host:port or redis:// URL, a PostgreSQL URL) and checks that they
// accept the credentials, before any check runs: a setup mistake is then
// ErrInvalidOption (a malformed address), ErrAuth (a refused password),
// ErrMisconfigured (a missing database) or ErrUnavailable (unreachable),
// never a contract failure. Messages never show a password.
func CheckFenced(ctx context.Context, redisAddr, postgresURL string) error {
	if redisAddr != "" {
		o, err := fencedRedisOptions(redisAddr)
		if err != nil {
			return err
		}
		o.MaxRetries = -1
		c := goredis.NewClient(o)
		err = c.Ping(ctx).Err()
		_ = c.Close()
		if err != nil {
			return backend.ScrubError(redisAddr, fmt.Errorf("fenced Redis %s: %w", o.Addr, backend.Wrap(fencedCode(redislua.ErrorCode(err)), redislua.Explain(err))))
		}
	}
	if postgresURL != "" {
		cfg, err := pgxpool.ParseConfig(postgresURL)
		if err != nil {
			return backend.ScrubError(postgresURL, fmt.Errorf("%w: fenced PostgreSQL %q: %s", backend.ErrInvalidOption, backend.RedactURL(postgresURL), backend.Scrub(postgresURL, err.Error())))
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err == nil {
			err = pool.Ping(ctx)
			pool.Close()
		}
		if err != nil {
			return backend.ScrubError(postgresURL, fmt.Errorf("fenced PostgreSQL %s: %w", backend.RedactURL(postgresURL), backend.Wrap(pgFencedCode(err), backend.OneLine(err))))
		}
	}
	return nil
}

// fencedCode keeps a code that names a class, and makes every other
// failure to reach the resource ErrUnavailable.
func fencedCode(c backend.Code) backend.Code {
	switch c {
	case backend.CodeAuth, backend.CodeMisconfigured, backend.CodeTransient, backend.CodeUnavailable:
		return c
	}
	return backend.CodeUnavailable
}

// pgFencedCode classifies the error of connecting to the fenced PostgreSQL.
func pgFencedCode(err error) backend.Code {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "28"), pe.Code == "42501":
			return backend.CodeAuth
		case pe.Code == "3D000":
			return backend.CodeMisconfigured
		}
	}
	return backend.CodeUnavailable
}
