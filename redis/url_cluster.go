package redis

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/redisurl"
)

func init() {
	backend.Register("redis+cluster", openCluster)
	backend.Register("rediss+cluster", openCluster)
	backend.Register("redis+sentinel", openSentinel)
	backend.Register("rediss+sentinel", openSentinel)
}

// paramMaster names the Sentinel-monitored master of a redis+sentinel URL.
const paramMaster = "master"

// clusterStateReload is how old the slot map of a Cluster URL's client
// may grow before a command makes it reload the map (one CLUSTER SLOTS in
// the background): about the time a Cluster takes to fail a master over.
const clusterStateReload = time.Second

// Default ports of a host given without one.
const (
	clusterPort  = "6379"
	sentinelPort = "26379"
)

// openCluster is the OpenFunc of Redis Cluster URLs:
//
//	redis+cluster://[user:password@]host:port[,host:port...][/][?param=value&...]
//	rediss+cluster://...  (TLS to every node)
//
// The hosts are seed nodes: the client learns the slot map from any of
// them, follows MOVED and ASK redirections, and reloads the map in the
// background when it is more than a second old, so that the slots of a
// master that died are served by the replica that took over within about
// a second of the promotion. The credentials apply to
// every node. A Cluster has only database 0, so the URL has no db. The
// parameters are those of redis:// URLs (go-redis's connection parameters
// apply per node, pool_size included; distlock's own: prefix,
// subscribe_timeout, subscription_linger, fair, wait_replicas,
// wait_timeout); any other is an ErrInvalidOption. Like open, it does not
// connect.
func openCluster(_ context.Context, u *url.URL) (backend.Driver, error) {
	opt, opts, err := parseClusterURL(u)
	if err != nil {
		return nil, err
	}
	return openDriver(goredis.NewClusterClient(opt), opts)
}

// openSentinel is the OpenFunc of Sentinel URLs:
//
//	redis+sentinel://[user:password@]host:port[,host:port...][/db]?master=name[&param=value...]
//	rediss+sentinel://...  (TLS to the sentinels and to the data nodes)
//
// The hosts are sentinels (port 26379 by default); master= names the
// monitored master, whose current address the client asks them for, and
// follows across failovers. The credentials are the data nodes' (the
// sentinels are contacted without AUTH: for sentinels that require a
// password build a go-redis FailoverClient and call New). db and the
// parameters are those of redis:// URLs.
func openSentinel(_ context.Context, u *url.URL) (backend.Driver, error) {
	opt, opts, err := parseSentinelURL(u)
	if err != nil {
		return nil, err
	}
	return openDriver(goredis.NewFailoverClient(opt), opts)
}

// openDriver makes the driver of a URL opener, which owns client.
func openDriver(client goredis.UniversalClient, opts []Option) (backend.Driver, error) {
	c, err := newConfig(append(opts, WithCloseClient()))
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	d, err := newDriver(client, c)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return d.backend(), nil
}

// parseClusterURL returns the ClusterOptions and distlock Options of a
// Cluster URL.
func parseClusterURL(u *url.URL) (*goredis.ClusterOptions, []Option, error) {
	form := u.Scheme + "://[user:password@]host:port[,host:port...][?param=value...]"
	node, hosts, opts, err := parseMulti(u, form, clusterPort, nil)
	if err != nil {
		return nil, nil, err
	}
	if node.DB != 0 {
		return nil, nil, fmt.Errorf("%w: %s URL names database %d: a Redis Cluster has only database 0", backend.ErrInvalidOption, u.Scheme, node.DB)
	}
	c := universal(node, hosts).Cluster()
	// go-redis reloads the slot map on MOVED, READONLY, or when it is
	// older than this (60s by default): a dead master only refuses
	// connections, so its slots' clients would keep dialling it for up to
	// a minute after a replica took over.
	c.ClusterStateReloadInterval = clusterStateReload
	return c, opts, nil
}

// parseSentinelURL returns the FailoverOptions and distlock Options of a
// Sentinel URL.
func parseSentinelURL(u *url.URL) (*goredis.FailoverOptions, []Option, error) {
	form := u.Scheme + "://[user:password@]host:port[,host:port...][/db]?master=name[&param=value...]"
	var master string
	node, hosts, opts, err := parseMulti(u, form, sentinelPort, func(p *backend.Params) {
		master = p.String(paramMaster, "")
	})
	if err != nil {
		return nil, nil, err
	}
	if master == "" {
		return nil, nil, fmt.Errorf("%w: %s URL needs master=<name> (the master the sentinels monitor)", backend.ErrInvalidOption, u.Scheme)
	}
	f := universal(node, hosts).Failover()
	f.MasterName = master
	return f, opts, nil
}

// universal carries the parsed per-node options of a multi-host URL to
// hosts: go-redis's UniversalOptions turns them into the Cluster or
// Failover client's options.
func universal(node *goredis.Options, hosts []string) *goredis.UniversalOptions {
	return &goredis.UniversalOptions{
		Addrs:                   hosts,
		ClientName:              node.ClientName,
		Dialer:                  node.Dialer,
		Protocol:                node.Protocol,
		Username:                node.Username,
		Password:                node.Password,
		DB:                      node.DB,
		MaxRetries:              node.MaxRetries,
		MinRetryBackoff:         node.MinRetryBackoff,
		MaxRetryBackoff:         node.MaxRetryBackoff,
		DialTimeout:             node.DialTimeout,
		DialerRetries:           node.DialerRetries,
		ReadTimeout:             node.ReadTimeout,
		WriteTimeout:            node.WriteTimeout,
		ContextTimeoutEnabled:   node.ContextTimeoutEnabled,
		MaxConcurrentDials:      node.MaxConcurrentDials,
		PoolFIFO:                node.PoolFIFO,
		PoolSize:                node.PoolSize,
		PoolTimeout:             node.PoolTimeout,
		MinIdleConns:            node.MinIdleConns,
		MaxIdleConns:            node.MaxIdleConns,
		MaxActiveConns:          node.MaxActiveConns,
		ConnMaxIdleTime:         node.ConnMaxIdleTime,
		ConnMaxLifetime:         node.ConnMaxLifetime,
		ConnMaxLifetimeJitter:   node.ConnMaxLifetimeJitter,
		PipelineReadBufferSize:  node.PipelineReadBufferSize,
		PipelineWriteBufferSize: node.PipelineWriteBufferSize,
		PipelinePoolSize:        node.PipelinePoolSize,
		TLSConfig:               node.TLSConfig,
	}
}

// parseMulti runs the checks of a redis:// URL on a URL that lists
// several hosts (each defaulting to port def): the go-redis parameters are
// parsed and range-checked once, as for one node, into the returned
// Options (with the URL opener's dialing settings applied); distlock's
// parameters become Options. extra, if not nil, reads the scheme's own
// parameters before the unknown ones are refused.
func parseMulti(u *url.URL, form, def string, extra func(*backend.Params)) (*goredis.Options, []string, []Option, error) {
	own := ownParams
	if extra != nil {
		own = append(append([]string(nil), ownParams...), paramMaster)
	}
	p, rest, err := redisurl.Query(u, form, own)
	if err != nil {
		return nil, nil, nil, err
	}
	hosts, err := backend.Hosts(u, def)
	if err != nil {
		return nil, nil, nil, err
	}
	if extra != nil {
		extra(p)
	}
	opts, err := ownOptions(p)
	if err != nil {
		return nil, nil, nil, err
	}
	// go-redis parses the rest as it would for one node of the scheme's
	// kind (TLS or not).
	nu := *u
	nu.Scheme = "redis"
	if strings.HasPrefix(u.Scheme, "rediss") {
		nu.Scheme = "rediss"
	}
	node, err := redisurl.Node(&nu, hosts[0], rest, own)
	if err != nil {
		return nil, nil, nil, err
	}
	if node.TLSConfig != nil {
		// Each node's certificate is checked against the host dialled
		// (tlsDialer), not the first host's name: the client also dials
		// nodes the URL does not list.
		node.TLSConfig.ServerName = ""
	}
	configureDial(node)
	return node, hosts, opts, nil
}
