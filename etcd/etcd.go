package etcd

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

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
// every option value (ErrInvalidOption) and does not wait for the cluster
// (acquisitions do, bounded by WithConnectTimeout), except with WithAuth:
// the client then authenticates before Dial returns.
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

// dialClient makes the client of Dial and of the URL opener. With
// credentials (WithAuth) the etcd client authenticates in clientv3.New:
// a cluster of which no endpoint accepts connections fails at once
// (dialEndpoints), and the rest is bounded by the connect timeout.
func dialClient(endpoints []string, cfg *config) (*clientv3.Client, error) {
	logger := zap.NewNop()
	if cfg.logging {
		logger, _ = zap.NewProduction()
	}
	cc := clientv3.Config{
		Endpoints:            endpoints,
		Logger:               logger,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
	}
	if cfg.tls != nil {
		cc.TLS = cfg.tls
		cc.Endpoints = make([]string, len(endpoints))
		for i, ep := range endpoints {
			if !strings.Contains(ep, "://") {
				ep = "https://" + ep
			}
			cc.Endpoints[i] = ep
		}
	}
	if cfg.user != "" {
		if err := dialEndpoints(context.Background(), endpoints, cfg.tls); err != nil {
			return nil, err
		}
		cc.Username, cc.Password = cfg.user, cfg.pass
		cc.DialTimeout = cfg.connectTimeout()
	}
	client, err := clientv3.New(cc)
	if err != nil {
		code := backend.CodeTransient
		if authRefused(err) {
			code = backend.CodeAuth
		}
		return nil, backend.Wrap(code, backend.OneLine(fmt.Errorf("etcd: connect to %s: %w", strings.Join(endpoints, ","), err)))
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
