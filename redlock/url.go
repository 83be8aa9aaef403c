package redlock

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/redisurl"
)

func init() {
	backend.Register("redlock", open)
}

// URL parameters of distlock's own; every other parameter goes to go-redis's
// ParseURL for each node, which rejects the ones it does not know.
const (
	paramPrefix           = "prefix"              // key prefix (WithPrefix)
	paramNodeTimeout      = "node_timeout"        // Go duration (WithNodeTimeout)
	paramDriftFactor      = "drift_factor"        // float in [0, 1) (WithDrift)
	paramDriftMin         = "drift_min"           // Go duration >= 0 (WithDrift)
	paramSubscribeTimeout = "subscribe_timeout"   // Go duration (WithSubscribeTimeout)
	paramLinger           = "subscription_linger" // Go duration (WithSubscriptionLinger)
)

// DefaultURLNodeTimeout is the per-node timeout of a Locker opened by URL
// without node_timeout. It is longer than DefaultNodeTimeout because URLs
// serve the CLI and configuration files, often on small shared machines; a
// node's share of the validity is bounded by it.
const DefaultURLNodeTimeout = time.Second

var ownParams = []string{paramPrefix, paramNodeTimeout, paramDriftFactor, paramDriftMin, paramSubscribeTimeout, paramLinger}

// open is the OpenFunc of "redlock://" URLs (the form is in the package
// doc). Each client dials a node once per operation, retries a failed
// command once unless max_retries says otherwise, and bounds its socket I/O
// by the per-node timeout. open does not connect; the Locker closes the
// clients it creates.
func open(_ context.Context, u *url.URL) (backend.Driver, error) {
	opts, c, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	retriesSet := u.Query().Has("max_retries")
	c.closeClients = true
	nodes := make([]*node, len(opts))
	for i, o := range opts {
		o.ContextTimeoutEnabled = true // the per-node timeout bounds socket I/O
		// One dial per operation: a node that refuses is reported at once
		// (go-redis would retry for 400ms, far beyond the per-node
		// timeout); Redlock's next attempt is the retry.
		o.DialerRetries = 1
		if !retriesSet {
			// One quick retry (after a stale pooled connection), not
			// three with backoff beyond the per-node timeout.
			o.MaxRetries = 1
		}
		nodes[i] = &node{addr: o.Addr, client: goredis.NewClient(o)}
	}
	d, err := newDriver(nodes, c) // New's checks
	if err != nil {
		for _, n := range nodes {
			_ = n.client.Close()
		}
		return nil, err
	}
	return d, nil
}

// parseURL splits a redlock URL into one go-redis Options per node and
// distlock's config.
func parseURL(u *url.URL) ([]*goredis.Options, config, error) {
	c := defaultConfig()
	c.nodeTimeout = DefaultURLNodeTimeout
	bad := func(format string, args ...any) ([]*goredis.Options, config, error) {
		return nil, c, fmt.Errorf("%w: %s", backend.ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	p, rest, err := redisurl.Query(u, "redlock://[user:password@]h1:6379,h2:6379,h3:6379[/db]", ownParams)
	if err != nil {
		return nil, c, err
	}
	hosts, err := backend.Hosts(u, "6379")
	if err != nil {
		return nil, c, err
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			return bad("host %q: %v", h, err)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return bad("host %q: port out of range", h)
		}
		key := strings.ToLower(net.JoinHostPort(host, port))
		if seen[key] {
			return bad("host %s is listed twice: Redlock needs independent masters", h)
		}
		seen[key] = true
	}
	c.prefix = p.String(paramPrefix, c.prefix)
	c.nodeTimeout = backend.Parse(p, paramNodeTimeout, c.nodeTimeout, backend.DurationIn(time.Millisecond, time.Minute))
	c.driftFactor = backend.Parse(p, paramDriftFactor, c.driftFactor, driftFactor)
	c.driftMin = backend.Parse(p, paramDriftMin, c.driftMin, backend.DurationIn(0, time.Hour))
	c.confirmTimeout = backend.Parse(p, paramSubscribeTimeout, 0, backend.DurationIn(time.Millisecond, time.Hour))
	if p.Has(paramLinger) {
		WithSubscriptionLinger(backend.Parse(p, paramLinger, 0, backend.DurationIn(0, time.Hour)))(&c)
	}
	if err := p.Done(); err != nil {
		return nil, c, err
	}
	opts := make([]*goredis.Options, len(hosts))
	for i, h := range hosts {
		if opts[i], err = redisurl.Node(u, h, rest, ownParams); err != nil {
			return nil, c, err
		}
	}
	return opts, c, nil
}

func driftFactor(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err == nil && !(f >= 0 && f < 1) {
		err = fmt.Errorf("must be in [0, 1)")
	}
	return f, err
}
