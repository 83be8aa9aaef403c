package openfuzz

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/assert"
)

// TestOpenRangeChecks: every numeric URL parameter out of its range is an
// ErrInvalidOption from Open, never a panic (go-redis panicked on
// pool_size=-5 and pool_size=100000000000).
func TestOpenRangeChecks(t *testing.T) {
	redisBad := []string{
		"pool_size=-5", "pool_size=100000000000", "min_idle_conns=-1", "max_idle_conns=-1", "max_idle_conns=99999999",
		"max_active_conns=-3", "max_concurrent_dials=-1", "pipeline_pool_size=-2", "pipeline_read_buffer_size=-1",
		"pipeline_write_buffer_size=1000000000000", "max_retries=-2", "max_retries=1000000", "protocol=7", "db=-1",
		"dial_timeout=99999999999", "read_timeout=9999999h", "conn_max_lifetime=99999999999",
		"subscribe_timeout=0s", "subscribe_timeout=1000h", "subscription_linger=-1s", "subscription_linger=2h",
	}
	var urls []string
	for _, q := range redisBad {
		urls = append(urls, "redis://127.0.0.1:6379/0?"+q, "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?"+q)
	}
	urls = append(urls,
		"redis://127.0.0.1:6379/-1",
		"redlock://127.0.0.1:1,127.0.0.1:2?node_timeout=2h",
		"redlock://127.0.0.1:1,127.0.0.1:2?drift_min=-1ms",
		"redlock://127.0.0.1:1,127.0.0.1:2?drift_factor=1.5",
		"memcached://127.0.0.1:1?timeout=-1s",
		"memcached://127.0.0.1:1?timeout=1000h",
		"memcached://127.0.0.1:1?max_idle=0",
		"memcached://127.0.0.1:1?max_idle=1000000000000",
		"zookeeper://127.0.0.1:1/x?session_timeout=0s",
		"zookeeper://127.0.0.1:1/x?session_timeout=10000h",
		"zookeeper://127.0.0.1:1/x?session_margin=-1s",
		"zookeeper://127.0.0.1:1/x?connect_timeout=100000h",
		"mysql://u:p@127.0.0.1:1/db?max_conns=-1",
		"mysql://u:p@127.0.0.1:1/db?maxConns=100000000000",
		"mysql://u:p@127.0.0.1:1/db?timeout=-5s",
		"mysql://u:p@127.0.0.1:1/db?keepalive=-1s",
		"mysql://u:p@127.0.0.1:1/db?mode=forupdate&session_timeout=1000h",
		"mysql://u:p@127.0.0.1:1/db?sessionTimeout=3s&session_timeout=3s",
	)
	for _, raw := range urls {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		l, err := distlock.Open(ctx, raw)
		cancel()
		if err == nil {
			_ = l.Close()
			t.Errorf("Open(%q) succeeded, want ErrInvalidOption", raw)
			continue
		}
		assert.ErrorIs(t, err, distlock.ErrInvalidOption, "Open(%q)", raw)
	}
}
