package redissub

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/testkit/testserver"
)

// client is a client of a new redis-server of the test's own.
func client(t *testing.T) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: testserver.Redis(t, testserver.RedisConfig{}).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
