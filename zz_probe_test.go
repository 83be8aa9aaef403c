package distlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/testserver"
	_ "github.com/distlock/distlock/memcached"
	_ "github.com/distlock/distlock/redis"
	_ "github.com/distlock/distlock/redlock"
	_ "github.com/distlock/distlock/zookeeper"
)

func TestProbePausedAdmin(t *testing.T) {
	r := testserver.Redis(t, testserver.RedisConfig{})
	m := testserver.Memcached(t, testserver.MemcachedConfig{})
	z := testserver.ZooKeeper(t, testserver.ZooKeeperConfig{})
	rs := testserver.RedisN(t, 3)
	var ra []string
	for _, s := range rs {
		ra = append(ra, s.Addr())
	}
	cases := []struct {
		url   string
		pause func()
		res   func()
	}{
		{"redis://" + r.Addr() + "/0", func() { r.Pause() }, func() { r.Resume() }},
		{"memcached://" + m.Addr(), func() { m.Pause() }, func() { m.Resume() }},
		{"zookeeper://" + z.Addr(), func() { z.Pause() }, func() { z.Resume() }},
		{"redlock://" + strings.Join(ra, ",") + "/0", func() { for _, s := range rs { s.Pause() } }, func() { for _, s := range rs { s.Resume() } }},
	}
	for _, c := range cases {
		ctx := t.Context()
		l, err := distlock.Open(ctx, c.url)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := distlock.Inspect(ctx, l, "k"); err != nil {
			t.Fatal(err)
		}
		c.pause()
		for _, op := range []func(context.Context, distlock.Locker, string) (distlock.LockInfo, error){distlock.Inspect, distlock.ForceRelease} {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			start := time.Now()
			_, err := op(cctx, l, "k")
			cancel()
			t.Logf("%s: ctx: %v after %v; is deadline %v", c.url[:8], err, time.Since(start), errors.Is(err, context.DeadlineExceeded))
		}
		done := make(chan error, 1)
		go func() {
			_, err := distlock.ForceRelease(ctx, l, "k")
			done <- err
		}()
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		cerr := l.Close()
		select {
		case err := <-done:
			t.Logf("%s: close: %v after %v (close %v); closed %v", c.url[:8], err, time.Since(start), cerr, errors.Is(err, distlock.ErrClosed))
		case <-time.After(20 * time.Second):
			t.Errorf("%s: ForceRelease still waiting 20s after Close", c.url[:8])
		}
		c.res()
	}
}
