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

// New returns a Locker over an existing client, which stays the caller's:
// Close revokes the Locker's session lease (freeing its locks) but does not
// close the client. It checks every option value and that client is not
// nil (ErrInvalidOption); it does not contact the cluster.
func New(client *clientv3.Client, opts ...Option) (*distlock.Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: etcd: New: nil *clientv3.Client", backend.ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	d := newDriver(cfg, client, false)
	return distlock.New(d, "etcd", cfg.defaults...), nil
}

// Dial returns a Locker with a client of its own on the cluster's client
// endpoints ("host:port" or URLs), which Close closes. Like New it checks
// every option value (ErrInvalidOption) and does not wait for the cluster
// (acquisitions do, bounded by WithConnectTimeout), except with WithAuth:
// the client then authenticates before Dial returns.
func Dial(endpoints []string, opts ...Option) (*distlock.Locker, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("%w: etcd: no endpoint given", backend.ErrInvalidOption)
	}
	d, cfg, err := dialDriver(endpoints, opts)
	if err != nil {
		return nil, err
	}
	return distlock.New(d, "etcd", cfg.defaults...), nil
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
