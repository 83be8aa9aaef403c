package openfuzz

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// TestWithRetryUnavailable: Acquire with the option rides out a server
// that is down and comes back within ctx; without it, it fails at once;
// with it, a refused password still fails at once.
func TestWithRetryUnavailable(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	url := "redis://" + srv.Addr() + "/0"
	l, err := distlock.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
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
	if rerr := <-restarted; rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil {
		t.Fatalf("with WithRetryUnavailable, Acquire across a restart: %v", err)
	}
	_ = lease.Release(ctx)

	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "requirepass", "right").Err(); err != nil {
		t.Fatal(err)
	}
	bad, err := distlock.Open(ctx, "redis://:wrong@"+srv.Addr()+"/0")
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.Acquire(ctx, "k", distlock.WithRetryUnavailable(true)); err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("wrong password with WithRetryUnavailable: %v (ctx %v); want WRONGPASS before ctx ends", err, ctx.Err())
	}
}
