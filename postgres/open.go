package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

func init() {
	backend.Register("postgres", open)
	backend.Register("postgresql", open)
}

// DefaultSessionTimeout is the idle_session_timeout a URL-opened advisory
// Locker sets on its sessions (parameter session_timeout): the server ends a
// session that sends nothing for that long, freeing its locks. It bounds how
// long a partitioned or frozen holder keeps a lock; the holder's keepalive
// and deadline declare the lock lost shortly before.
const DefaultSessionTimeout = 30 * time.Second

// DefaultMaxConns is the pool size of a URL-opened Locker (parameter
// pool_max_conns). In advisory mode it bounds the locks held or waited for
// at once.
const DefaultMaxConns = 32

// Limits of the numeric URL parameters.
const (
	maxPoolConns      = 10000
	maxKeepalive      = time.Hour
	minSessionTimeout = time.Second
	maxSessionTimeout = 24 * time.Hour
	maxConnectTimeout = time.Hour
)

// passThrough are the libpq parameters handed to pgx as they are.
var passThrough = []string{"sslmode", "sslrootcert", "sslcert", "sslkey", "application_name", "target_session_attrs"}

var sslModes = []string{"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}

// open is the URL opener of "postgres" and "postgresql"; the parameters
// are listed in docs/backends/postgres.md. It takes one host, owns the pool
// it creates, checks within ctx that the server accepts the login, and no
// error repeats the password.
func open(ctx context.Context, u *url.URL) (backend.Driver, error) {
	cfg, c, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, backend.OneLine(fmt.Errorf("%w: %w", backend.ErrInvalidOption, err))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s: %w", u.Host, sqllock.OpenError(ctx, err, errorCode))
	}
	return newDriver(pool, func() error { pool.Close(); return nil }, c), nil
}

// parseURL checks u and builds the pool configuration and the Locker's
// configuration.
func parseURL(u *url.URL) (*pgxpool.Config, config, error) {
	bad := func(format string, args ...any) (*pgxpool.Config, config, error) {
		return nil, config{}, fmt.Errorf("%w: "+format, append([]any{backend.ErrInvalidOption}, args...)...)
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("want %s://user:password@host:5432/database, got %q", u.Scheme, u.Redacted())
	}
	hosts, err := backend.Hosts(u, "5432")
	if err != nil {
		return nil, config{}, err
	}
	if len(hosts) != 1 {
		return bad("a postgres URL takes one host, got %d", len(hosts))
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	if dbName == "" || strings.Contains(dbName, "/") {
		return bad("a postgres URL needs a database name as its path (postgres://host:5432/db), got %q", u.Path)
	}
	if _, err := url.ParseQuery(u.RawQuery); err != nil {
		// url.URL.Query drops what it cannot parse: refuse instead.
		return bad("query %q: %v", u.RawQuery, err)
	}
	p := backend.NewParams(u)
	opts := []Option{
		WithCreateTable(backend.Parse(p, "create_table", false, strconv.ParseBool)),
		WithNotify(backend.Parse(p, "notify", false, strconv.ParseBool)),
		WithKeepalive(backend.Parse(p, "keepalive", DefaultKeepalive, backend.DurationIn(time.Millisecond, maxKeepalive))),
		WithCleanup(sqllock.CleanupParams(p)),
	}
	if m, ok := sqllock.Param(p, "mode"); ok {
		opts = append(opts, WithMode(Mode(m)))
	}
	if t, ok := sqllock.Param(p, "table"); ok {
		opts = append(opts, WithTable(t))
	}
	sessionTimeout := backend.Parse(p, "session_timeout", DefaultSessionTimeout, func(s string) (time.Duration, error) {
		d, err := backend.DurationIn(minSessionTimeout, maxSessionTimeout)(s)
		if err == nil && d%time.Millisecond != 0 {
			err = errors.New("must be whole milliseconds (it becomes idle_session_timeout)")
		}
		return d, err
	})
	maxConns := backend.Parse(p, "pool_max_conns", DefaultMaxConns, backend.IntIn(1, maxPoolConns))
	connectTimeout := backend.Parse(p, "connect_timeout", 5, backend.IntIn(1, int(maxConnectTimeout/time.Second)))
	pass := url.Values{}
	for _, name := range passThrough {
		if p.Has(name) {
			pass.Set(name, p.String(name, ""))
		} else {
			p.String(name, "")
		}
	}
	if m := pass.Get("sslmode"); m != "" && !slices.Contains(sslModes, m) {
		return bad("sslmode=%q (want one of %s)", m, strings.Join(sslModes, ", "))
	}
	if err := p.Done(); err != nil {
		return nil, config{}, err
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, config{}, err
	}
	pass.Set("connect_timeout", strconv.Itoa(connectTimeout))
	cu := url.URL{Scheme: "postgres", User: u.User, Host: hosts[0], Path: "/" + dbName, RawQuery: pass.Encode()}
	cfg, err := pgxpool.ParseConfig(cu.String())
	if err != nil {
		// pgx's parse errors may quote the connection string: never
		// pass them on, they could carry the password.
		return bad("the URL's connection settings were refused by pgx")
	}
	cfg.MaxConns = int32(maxConns)
	if c.Mode == string(ModeAdvisory) {
		limitSessions(cfg, sessionTimeout)
	}
	return cfg, c, nil
}

// limitSessions makes the server end a session silent for st (advisory
// mode's sessions hold its locks): idle_session_timeout, and TCP keepalives
// that give up within it.
func limitSessions(cfg *pgxpool.Config, st time.Duration) {
	rp := cfg.ConnConfig.RuntimeParams
	rp["idle_session_timeout"] = strconv.FormatInt(st.Milliseconds(), 10)
	idle, interval := max(1, int(st/time.Second)/2), max(1, int(st/time.Second)/8)
	rp["tcp_keepalives_idle"] = strconv.Itoa(idle)
	rp["tcp_keepalives_interval"] = strconv.Itoa(interval)
	rp["tcp_keepalives_count"] = "3"
	// Close idle pooled connections before the server does (a
	// connection the server closed anyway fails pgxpool's ping on
	// Acquire and is replaced).
	cfg.MaxConnIdleTime = st / 2
	cfg.HealthCheckPeriod = min(cfg.HealthCheckPeriod, st/4)
}
