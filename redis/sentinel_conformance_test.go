package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// TestConformanceSentinel runs the whole suite, fault checks included,
// against a Sentinel-managed primary with two replicas (AOF appendfsync
// always), opening every Locker by redis+sentinel:// URL, worker
// processes included. Per-link faults pass every connection of one client
// (to the sentinels and to the data nodes) through its own proxy. The
// sentinels' down-after is longer than a restart of the primary, so the
// server fault (the primary killed and restarted) is not a failover: a
// failover can lose grants (TestFailoverDoubleGrant).
func TestConformanceSentinel(t *testing.T) {
	t.Parallel()
	set := testserver.RedisSentinel(t, testserver.SentinelConfig{Replicas: 2, Sentinels: 3, Persistence: true, DownAfter: 30 * time.Second})
	const prefix = "scf:"
	url := set.URL("prefix=" + prefix)
	fencedSrv := testserver.Redis(t, testserver.RedisConfig{})
	primary := func(ctx context.Context) (*goredis.Client, error) {
		p, err := set.Primary(ctx)
		if err != nil {
			return nil, err
		}
		return goredis.NewClient(&goredis.Options{Addr: p.Addr()}), nil
	}
	onPrimary := func(ctx context.Context, f func(c *goredis.Client) error) error {
		c, err := primary(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		return f(c)
	}
	all := append(append([]*testserver.Server(nil), set.Nodes...), set.Sentinels...)
	conformance.Run(t, conformance.Harness{
		Name: "redis-sentinel",
		NewLocker: func(ctx context.Context) (*distlock.Locker, error) {
			return distlock.Open(ctx, url)
		},
		// A client's first request asks a sentinel for the primary and
		// dials both before the acquisition goes out, and the validity
		// counts from before all that: a worker process's only
		// acquisition, under -race on a loaded machine, outlasted 400ms.
		TTL:            slack.D(time.Second),
		URL:            url,
		FencedRedis:    fencedSrv.Addr(),
		UnreachableURL: "redis+sentinel://127.0.0.1:1/0?master=" + set.Master,
		BadURLs:        []string{"redis+sentinel://a:1/0", "redis+sentinel://a:1/x?master=m"},
		BadTTLs:        []time.Duration{time.Nanosecond, time.Microsecond, 1500 * time.Microsecond},
		Faults: conformance.Faults{
			Expire: func(ctx context.Context, key string) error {
				return onPrimary(ctx, func(c *goredis.Client) error { return expireFault(c, prefix)(ctx, key) })
			},
			NewLinkedLocker: sentinelLinkedLocker(url, set),
			StopBackend: func(context.Context) error {
				var errs []error
				for _, s := range all {
					errs = append(errs, s.Kill())
				}
				return errors.Join(errs...)
			},
			StartBackend: func(ctx context.Context) error {
				for _, s := range all {
					if err := s.RestartNoWait(); err != nil {
						return err
					}
				}
				return set.WaitSettled(ctx)
			},
			Held: func(ctx context.Context) (held []string, err error) {
				err = onPrimary(ctx, func(c *goredis.Client) error {
					held, err = heldLocks(c, prefix)(ctx)
					return err
				})
				return held, err
			},
			ServerFaults: []conformance.ServerFault{{
				Name: "redis primary killed and restarted before the sentinels fail it over (AOF always)",
				Inject: func(ctx context.Context) (func(context.Context) error, error) {
					p, err := set.Primary(ctx)
					if err != nil {
						return nil, err
					}
					return p.Restart, p.Kill()
				},
			}},
		},
	})
}

// sentinelLinkedLocker opens Lockers from url whose every connection, to
// the sentinels and to the data nodes, passes through one proxy per
// server, together the returned Link.
func sentinelLinkedLocker(raw string, set *testserver.SentinelSet) func(ctx context.Context) (*distlock.Locker, conformance.Link, error) {
	return func(ctx context.Context) (*distlock.Locker, conformance.Link, error) {
		u, err := backend.ParseURL(raw)
		if err != nil {
			return nil, nil, err
		}
		opt, opts, err := parseSentinelURL(u)
		if err != nil {
			return nil, nil, err
		}
		var targets []string
		for _, s := range append(append([]*testserver.Server(nil), set.Sentinels...), set.Nodes...) {
			targets = append(targets, s.Addr())
		}
		g, dial, err := proxiedDialer(targets)
		if err != nil {
			return nil, nil, err
		}
		opt.Dialer = dial
		drv, err := openDriver(goredis.NewFailoverClient(opt), opts)
		if err != nil {
			_ = g.Close()
			return nil, nil, err
		}
		return distlock.New(drv, "redis+sentinel"), g, nil
	}
}
