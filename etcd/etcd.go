package etcd

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

func init() {
	backend.Register("etcd", open)
}

// Defaults.
const (
	// DefaultPrefix is the key prefix of the locks when neither the URL
	// path nor WithPrefix names one.
	DefaultPrefix = "/distlock"
	// DefaultSessionTTL is the TTL of a session's lease.
	DefaultSessionTTL = 10 * time.Second
	// DefaultPort is used for URL hosts without a port.
	DefaultPort = "2379"
)

// Locker is a distlock.Locker on etcd, with etcd-specific methods
// (LeaseID, SessionTTL). Its methods are safe for concurrent use.
type Locker struct {
	distlock.Locker
	d *driver
}

// New returns a Locker over an existing client, which stays the caller's:
// Close revokes the Locker's session lease (freeing its locks) but does not
// close the client. It checks every option value and that client is not
// nil (ErrInvalidOption); it does not contact the cluster.
func New(client *clientv3.Client, opts ...Option) (*Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: etcd: New: nil *clientv3.Client", backend.ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	d := newDriver(cfg, client, false)
	return &Locker{Locker: distlock.New(d, "etcd", cfg.defaults...), d: d}, nil
}

// Dial returns a Locker with a client of its own on the cluster's client
// endpoints ("host:port" or URLs), which Close closes. Like New it checks
// every option value (ErrInvalidOption) and does not wait for the cluster:
// acquisitions do, bounded by WithConnectTimeout.
func Dial(endpoints []string, opts ...Option) (*Locker, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("%w: etcd: no endpoint given", backend.ErrInvalidOption)
	}
	d, cfg, err := dialDriver(endpoints, opts)
	if err != nil {
		return nil, err
	}
	return &Locker{Locker: distlock.New(d, "etcd", cfg.defaults...), d: d}, nil
}

// dialDriver checks opts and returns a driver with a client of its own on
// endpoints: the one path of Dial and the URL opener.
func dialDriver(endpoints []string, opts []Option) (*driver, *config, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, nil, err
	}
	client, err := dialClient(endpoints, cfg)
	if err != nil {
		return nil, nil, err
	}
	return newDriver(cfg, client, true), cfg, nil
}

func dialClient(endpoints []string, cfg *config) (*clientv3.Client, error) {
	logger := zap.NewNop()
	if cfg.logging {
		logger, _ = zap.NewProduction()
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		Logger:               logger,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: etcd: %w", backend.ErrUnavailable, err)
	}
	return client, nil
}

// LeaseID returns the id of the current session's etcd lease, 0 before a
// session is established or after it was lost.
func (l *Locker) LeaseID() clientv3.LeaseID {
	if s := l.d.current(); s != nil {
		return s.id
	}
	return 0
}

// SessionTTL returns the TTL the cluster granted the current session's
// lease, 0 when there is none.
func (l *Locker) SessionTTL() time.Duration {
	if s := l.d.current(); s != nil {
		return s.ttl
	}
	return 0
}

// Unwrap returns the distlock.Locker inside l, through which
// distlock.Inspect and distlock.ForceRelease reach the backend.
func (l *Locker) Unwrap() distlock.Locker { return l.Locker }

// open is the URL opener:
// etcd://h1:2379,h2:2379/prefix?session_ttl=10s&session_margin=1s&connect_timeout=5s&hold_watch=true&log=true
func open(_ context.Context, u *url.URL) (backend.Driver, error) {
	endpoints, err := urlEndpoints(u)
	if err != nil {
		return nil, err
	}
	opts, err := urlOptions(u)
	if err != nil {
		return nil, err
	}
	d, _, err := dialDriver(endpoints, opts)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// urlEndpoints checks the form of an etcd:// URL and returns its hosts.
func urlEndpoints(u *url.URL) ([]string, error) {
	if u.Opaque != "" {
		return nil, fmt.Errorf("%w: etcd URL must be etcd://host:port[,host:port...]/prefix, got %q", backend.ErrInvalidOption, u.Redacted())
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: etcd URL: credentials are not supported; use etcd.New with a *clientv3.Client you configured", backend.ErrInvalidOption)
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("%w: etcd URL: unexpected fragment %q", backend.ErrInvalidOption, u.Fragment)
	}
	hosts, err := backend.Hosts(u, DefaultPort)
	if err != nil {
		return nil, err
	}
	for _, h := range hosts {
		port := h[strings.LastIndexByte(h, ':')+1:]
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%w: etcd URL: bad port in %q", backend.ErrInvalidOption, h)
		}
	}
	return hosts, nil
}

// urlOptions returns the Options that the URL's path and parameters stand
// for.
func urlOptions(u *url.URL) ([]Option, error) {
	prefix := u.Path
	if prefix == "" || prefix == "/" {
		prefix = DefaultPrefix
	}
	p := backend.NewParams(u)
	ttl := backend.Parse(p, "session_ttl", DefaultSessionTTL, backend.DurationIn(2*time.Second, 24*time.Hour))
	margin := backend.Parse(p, "session_margin", time.Duration(0), backend.DurationIn(0, 12*time.Hour))
	cw := backend.Parse(p, "connect_timeout", time.Duration(0), backend.DurationIn(time.Millisecond, 24*time.Hour))
	logOn := backend.Parse(p, "log", false, strconv.ParseBool)
	holdWatch := backend.Parse(p, "hold_watch", true, strconv.ParseBool)
	if err := p.Done(); err != nil {
		return nil, err
	}
	opts := []Option{WithPrefix(prefix), WithSessionTTL(ttl), WithHoldWatch(holdWatch)}
	if margin > 0 {
		opts = append(opts, WithSessionMargin(margin))
	}
	if cw > 0 {
		opts = append(opts, WithConnectTimeout(cw))
	}
	if logOn {
		opts = append(opts, func(c *config) { c.logging = true })
	}
	return opts, nil
}
