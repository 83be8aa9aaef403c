package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

func init() { backend.Register("mysql", open) }

// DefaultSessionTimeout is the wait_timeout a URL-opened forupdate Locker
// sets on its connections (parameter session_timeout): the server ends a
// session that sends nothing for that long, freeing its locks. It bounds how
// long a partitioned or frozen holder keeps a lock; the holder's keepalive
// declares the lock lost shortly before.
const DefaultSessionTimeout = 30 * time.Second

// DefaultMaxConns is the connection pool size of a URL-opened Locker
// (parameter max_conns). In forupdate mode it bounds the locks held or waited
// for at once to DefaultMaxConns-1.
const DefaultMaxConns = 32

// open is the URL opener of "mysql"; the parameters are listed in
// docs/backends/mysql.md. It owns the pool it creates (interpolateParams,
// so each statement is one round trip) and checks within ctx that the
// server accepts the login.
func open(ctx context.Context, u *url.URL) (backend.Driver, error) {
	cfg, c, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	connector, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", backend.ErrInvalidOption, err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(c.maxConns)
	db.SetMaxIdleConns(c.maxConns)
	if c.Mode == string(ModeForUpdate) {
		// Close idle connections before the server's wait_timeout does.
		db.SetConnMaxIdleTime(c.sessionTimeout / 2)
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect to %s: %w", cfg.Addr, sqllock.OpenError(ctx, err, errorCode))
	}
	return newDriver(db, db.Close, c.config), nil
}

// urlConfig is what a URL configures: the Locker and its pool.
type urlConfig struct {
	config
	maxConns       int
	sessionTimeout time.Duration
}

// hostAndDB checks the URL's form and returns its host:port and database.
func hostAndDB(u *url.URL) (string, string, error) {
	if u.Opaque != "" {
		return "", "", fmt.Errorf("%w: want mysql://user:pass@host:3306/db, got %q", backend.ErrInvalidOption, u.Redacted())
	}
	hosts, err := backend.Hosts(u, "3306")
	if err != nil {
		return "", "", err
	}
	if len(hosts) != 1 {
		return "", "", fmt.Errorf("%w: mysql URL takes one host, got %d", backend.ErrInvalidOption, len(hosts))
	}
	if _, port, err := net.SplitHostPort(hosts[0]); err != nil {
		return "", "", fmt.Errorf("%w: host %q: %v", backend.ErrInvalidOption, hosts[0], err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", "", fmt.Errorf("%w: port %q out of range 1-65535", backend.ErrInvalidOption, port)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	if dbName == "" || strings.Contains(dbName, "/") {
		return "", "", fmt.Errorf("%w: mysql URL needs a database name as its path (mysql://host:3306/db), got %q", backend.ErrInvalidOption, u.Path)
	}
	if _, err := url.ParseQuery(u.RawQuery); err != nil {
		// url.URL.Query drops what it cannot parse (such as a ';'): refuse
		// instead of silently ignoring a parameter.
		return "", "", fmt.Errorf("%w: query %q: %v", backend.ErrInvalidOption, u.RawQuery, err)
	}
	return hosts[0], dbName, nil
}

// parseURL checks u and builds the driver's configuration (the same
// options New takes, through the same checks) and the pool's.
func parseURL(u *url.URL) (*gomysql.Config, urlConfig, error) {
	host, dbName, err := hostAndDB(u)
	if err != nil {
		return nil, urlConfig{}, err
	}
	p := backend.NewParams(u)
	p.Rename("createTable", "create_table")
	p.Rename("sessionTimeout", "session_timeout")
	p.Rename("maxConns", "max_conns")
	opts := []Option{
		WithCreateTable(backend.Parse(p, "create_table", true, strconv.ParseBool)),
		WithKeepalive(backend.Parse(p, "keepalive", DefaultKeepalive, backend.DurationIn(time.Millisecond, time.Hour))),
		WithCleanup(sqllock.CleanupParams(p)),
	}
	if m, ok := sqllock.Param(p, "mode"); ok {
		opts = append(opts, WithMode(Mode(m)))
	}
	if t, ok := sqllock.Param(p, "table"); ok {
		opts = append(opts, WithTable(t))
	}
	maxConns := backend.Parse(p, "max_conns", DefaultMaxConns, backend.IntIn(1, 10_000))
	timeout := backend.Parse(p, "timeout", 5*time.Second, backend.DurationIn(time.Millisecond, time.Hour))
	sessionTimeout := backend.Parse(p, "session_timeout", DefaultSessionTimeout, func(s string) (time.Duration, error) {
		d, err := time.ParseDuration(s)
		if err == nil && (d < time.Second || d > 24*time.Hour || d%time.Second != 0) {
			err = fmt.Errorf("must be whole seconds in [1s, 24h] (it becomes wait_timeout)")
		}
		return d, err
	})
	tls := p.String("tls", "")
	switch tls {
	case "", "true", "false", "skip-verify", "preferred":
	default:
		return nil, urlConfig{}, fmt.Errorf("%w: tls=%q (want true, false, skip-verify or preferred)", backend.ErrInvalidOption, tls)
	}
	if err := p.Done(); err != nil {
		return nil, urlConfig{}, err
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, urlConfig{}, err
	}

	cfg := gomysql.NewConfig()
	cfg.Net = "tcp"
	cfg.Addr = host
	cfg.DBName = dbName
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.InterpolateParams = true
	cfg.Timeout = timeout
	cfg.TLSConfig = tls
	if c.Mode == string(ModeForUpdate) {
		cfg.Params = map[string]string{"wait_timeout": strconv.Itoa(int(sessionTimeout / time.Second))}
	}
	return cfg, urlConfig{config: c, maxConns: maxConns, sessionTimeout: sessionTimeout}, nil
}
