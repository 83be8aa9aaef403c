package redis

import (
	"context"
	"crypto/tls"
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
	backend.Register("redis", open)
	backend.Register("rediss", open)
}

// URL parameters of distlock's own; every other parameter goes to go-redis's
// ParseURL, which rejects the ones it does not know.
const (
	paramPrefix           = "prefix"              // key prefix (WithPrefix)
	paramSubscribeTimeout = "subscribe_timeout"   // Go duration (WithSubscribeTimeout)
	paramLinger           = "subscription_linger" // Go duration (WithSubscriptionLinger)
	paramFair             = "fair"                // true or false (WithFair)
	paramWaitReplicas     = "wait_replicas"       // integer (WithWaitReplicas)
	paramWaitTimeout      = "wait_timeout"        // Go duration (WithWaitReplicas)
)

var ownParams = []string{paramPrefix, paramSubscribeTimeout, paramLinger, paramFair, paramWaitReplicas, paramWaitTimeout}

// open is the OpenFunc of "redis://" and "rediss://" URLs:
//
//	redis://[user:password@]host:port[/db][?param=value&...]
//	rediss://...  (TLS; skip_verify=true disables certificate checks)
//
// The standard parts and go-redis's own query parameters (dial_timeout,
// read_timeout, pool_size, max_retries, client_name, protocol, ...) are
// parsed by go-redis's ParseURL. distlock adds prefix=, subscribe_timeout=,
// subscription_linger=, fair=, and wait_replicas= with wait_timeout=
// (WithWaitReplicas; wait_timeout defaults to 500ms and must be below
// read_timeout). Any other parameter is an ErrInvalidOption.
//
// Open does not connect: like database/sql.Open it only validates the URL,
// and the first operation dials. An unreachable server therefore shows up
// as ErrUnavailable from Acquire and TryAcquire, within their context: each
// command attempt dials once (go-redis's 5 dials 100ms apart per attempt
// are not used), and a refused connection is reported after max_retries
// quick retries.
// The Locker owns the client it creates and closes it in Close.
//
// One URL names one server. A Redis Cluster has its own URL
// (redis+cluster://, see openCluster), and so has a Sentinel-managed
// master (redis+sentinel://, see openSentinel).
func open(_ context.Context, u *url.URL) (backend.Driver, error) {
	opt, opts, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	c, err := newConfig(append(opts, WithCloseClient()))
	if err != nil {
		return nil, err
	}
	configureDial(opt)
	d, err := newDriver(goredis.NewClient(opt), c)
	if err != nil {
		return nil, err
	}
	return d.backend(), nil
}

// configureDial applies the URL openers' connection settings to opt:
// ctx deadlines bound socket I/O, one dial per command attempt, and TLS
// handshakes bounded by the dial timeout.
func configureDial(opt *goredis.Options) {
	opt.ContextTimeoutEnabled = true
	// One dial per command attempt (max_retries, 3 by default, still
	// applies): go-redis's default of 5 dials, 100ms apart, within each
	// attempt would report a server that refuses connections only after
	// about 1.8s — past a short ctx, which would then end the acquire with
	// a bare deadline instead of ErrUnavailable.
	opt.DialerRetries = 1
	if opt.TLSConfig != nil {
		opt.Dialer = tlsDialer(opt.TLSConfig, opt.DialTimeout)
	}
}

// tlsDialer dials and completes the TLS handshake within timeout (the
// dial_timeout, 5s by default). go-redis leaves the handshake to the first
// read, and a plain-text server never answers a ClientHello: an rediss://
// URL that names a plain port then hung until the caller's context ended,
// with nothing saying TLS was the cause.
func tlsDialer(cfg *tls.Config, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		d := net.Dialer{KeepAlive: 5 * time.Minute}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg
		if c.ServerName == "" {
			// Verify the certificate against the host dialled.
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			c = cfg.Clone()
			c.ServerName = host
		}
		tc := tls.Client(conn, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, &tlsError{addr: addr, err: err}
		}
		return tc, nil
	}
}

// parseURL splits the URL into go-redis options and distlock's, as the
// Options New takes (and checks).
func parseURL(u *url.URL) (*goredis.Options, []Option, error) {
	p, rest, err := redisurl.Query(u, u.Scheme+"://[user:password@]host:port[/db]", ownParams)
	if err != nil {
		return nil, nil, err
	}
	if strings.Contains(u.Host, ",") {
		return nil, nil, fmt.Errorf("%w: %s URL names several hosts (%s): it connects to one Redis; for Redis Cluster use redis+cluster://, for Sentinel redis+sentinel://, for independent masters redlock://", backend.ErrInvalidOption, u.Scheme, u.Host)
	}
	if _, err := backend.Hosts(u, "6379"); err != nil {
		return nil, nil, err
	}
	opts, err := ownOptions(p)
	if err != nil {
		return nil, nil, err
	}
	opt, err := redisurl.Node(u, u.Host, rest, ownParams)
	if err != nil {
		return nil, nil, err
	}
	return opt, opts, nil
}

// ownOptions turns distlock's URL parameters into Options, range-checked
// as URL parameters (subscribe_timeout in [1ms, 1h], subscription_linger
// in [0, 1h]); New's checks then apply to them as to any Option.
func ownOptions(p *backend.Params) ([]Option, error) {
	var opts []Option
	if p.Has(paramPrefix) {
		opts = append(opts, WithPrefix(p.String(paramPrefix, "")))
	}
	if p.Has(paramSubscribeTimeout) {
		opts = append(opts, WithSubscribeTimeout(backend.Parse(p, paramSubscribeTimeout, time.Millisecond, backend.DurationIn(time.Millisecond, time.Hour))))
	}
	if p.Has(paramLinger) {
		opts = append(opts, WithSubscriptionLinger(backend.Parse(p, paramLinger, 0, backend.DurationIn(0, time.Hour))))
	}
	if backend.Parse(p, paramFair, false, strconv.ParseBool) {
		opts = append(opts, WithFair())
	}
	wait, err := waitOption(p)
	if err != nil {
		return nil, err
	}
	if wait != nil {
		opts = append(opts, wait)
	}
	return opts, p.Done()
}
