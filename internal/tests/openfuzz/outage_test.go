package openfuzz

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// TestWithRetryUnavailable: Acquire with the option rides out a server
// that is down and comes back within ctx; without it, it fails at once;
// with it, a refused password still fails at once.
func TestWithRetryUnavailable(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	url := "redis://" + srv.Addr() + "/0"
	l, err := distlock.Open(context.Background(), url)
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, srv.Kill())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := l.Acquire(ctx, "k"); !errors.Is(err, distlock.ErrUnavailable) || ctx.Err() != nil {
		t.Fatalf("without the option, Acquire against a stopped server: %v (ctx %v); want ErrUnavailable at once", err, ctx.Err())
	}
	restarted := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		restarted <- srv.Restart(context.Background())
	}()
	lease, err := l.Acquire(ctx, "k", distlock.WithRetryUnavailable(true))
	require.NoError(t, <-restarted)
	require.NoError(t, err, "with WithRetryUnavailable, Acquire across a restart")
	_ = lease.Release(ctx)

	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	require.NoError(t, admin.ConfigSet(ctx, "requirepass", "right").Err())
	bad, err := distlock.Open(ctx, "redis://:wrong@"+srv.Addr()+"/0")
	require.NoError(t, err)
	defer bad.Close()
	if _, err := bad.Acquire(ctx, "k", distlock.WithRetryUnavailable(true)); err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("wrong password with WithRetryUnavailable: %v (ctx %v); want WRONGPASS before ctx ends", err, ctx.Err())
	}
}

// TestRefusedCredentialsAreErrAuth: a refused password, or none where one is
// needed, is distlock.ErrAuth and never ErrUnavailable (a caller that
// retries on ErrUnavailable looped forever on a bad password), on Redis and
// Redlock, for a long command (acquire) and a short one (inspect).
func TestRefusedCredentialsAreErrAuth(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	require.NoError(t, admin.ConfigSet(ctx, "requirepass", "right").Err())
	for _, url := range []string{
		"redis://:wrong@" + srv.Addr() + "/0",
		"redis://" + srv.Addr() + "/0",
		"redlock://:wrong@" + srv.Addr(),
		"redlock://" + srv.Addr(),
	} {
		l, err := distlock.Open(ctx, url)
		if err != nil {
			if !errors.Is(err, distlock.ErrAuth) || errors.Is(err, distlock.ErrUnavailable) {
				t.Errorf("Open(%s): %v; want ErrAuth, not ErrUnavailable", url, err)
			}
			continue
		}
		_, aerr := l.Acquire(ctx, "k", distlock.WithRetryUnavailable(true))
		_, ierr := l.Inspect(ctx, "k")
		for op, err := range map[string]error{"Acquire": aerr, "Inspect": ierr} {
			if errors.Is(err, errors.ErrUnsupported) {
				continue
			}
			if !errors.Is(err, distlock.ErrAuth) || errors.Is(err, distlock.ErrUnavailable) || ctx.Err() != nil {
				t.Errorf("%s on %s: %v; want ErrAuth, not ErrUnavailable, at once", op, url, err)
			}
		}
		l.Close()
	}
}

// restartable is a server the outage test can stop and bring back, with the
// URL that opens a Locker on it.
type restartable struct {
	name string
	srv  *testserver.Server
	url  string
}

// TestWithRetryUnavailableEveryBackend: on every network backend, Acquire
// without the option fails at once against a stopped server with
// ErrUnavailable, and with it rides out the stop and restart. It proves
// each driver's ErrorCode marks its client's outage errors transient (the
// root no longer recognises them by message).
func TestWithRetryUnavailableEveryBackend(t *testing.T) {
	// Each backend's subtest starts its own server and runs in parallel
	// with the others: their outages are independent.
	backends := []struct {
		name  string
		start func(t *testing.T) restartable
	}{
		{"redis", func(t *testing.T) restartable {
			rs := testserver.Redis(t, testserver.RedisConfig{})
			return restartable{"redis", rs, "redis://" + rs.Addr() + "/0"}
		}},
		{"memcached", func(t *testing.T) restartable {
			mc := testserver.Memcached(t, testserver.MemcachedConfig{})
			return restartable{"memcached", mc, "memcached://" + mc.Addr()}
		}},
		{"zookeeper", func(t *testing.T) restartable {
			zk := testserver.ZooKeeper(t, testserver.ZooKeeperConfig{})
			return restartable{"zookeeper", zk, "zookeeper://" + zk.Addr() + "/outage"}
		}},
		{"mysql", func(t *testing.T) restartable {
			my := testserver.MariaDBServer(t)
			return restartable{"mysql", my.Server, fmt.Sprintf("mysql://%s:%s@%s/%s?mode=row&create_table=true&table=outage_locks", my.User, my.Password, my.Addr(), my.DB)}
		}},
		{"postgres", func(t *testing.T) restartable {
			pg := testserver.PostgresServer(t)
			return restartable{"postgres", pg.Server, fmt.Sprintf("postgres://%s:%s@%s/%s?mode=row&create_table=true&table=outage_locks", pg.User, pg.Password, pg.Addr(), pg.DB)}
		}},
	}
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			b := bk.start(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			l, err := distlock.Open(ctx, b.url)
			require.NoError(t, err)
			defer l.Close()
			lease, err := l.Acquire(ctx, "outage") // the table exists, the session is up
			require.NoError(t, err)
			_ = lease.Release(ctx)
			require.NoError(t, b.srv.Kill())
			short, cancelShort := context.WithTimeout(ctx, 30*time.Second)
			_, err = l.Acquire(short, "outage")
			cancelShort()
			require.ErrorIs(t, err, distlock.ErrUnavailable, "without the option, Acquire against a stopped server")
			restarted := make(chan error, 1)
			go func() {
				time.Sleep(time.Second)
				restarted <- b.srv.Restart(ctx)
			}()
			lease, err = l.Acquire(ctx, "outage", distlock.WithRetryUnavailable(true))
			require.NoError(t, <-restarted)
			require.NoError(t, err, "with WithRetryUnavailable, Acquire across a restart")
			_ = lease.Release(ctx)
		})
	}
}
