package redisurl

import (
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
)

// Limits of the numeric parameters. They are far beyond any useful setting
// and far below what overflows or exhausts memory.
const (
	MaxDB         = 1 << 20  // db (Redis's databases setting is an int; 16 by default)
	MaxConns      = 10_000   // pool_size, min/max_idle_conns, max_active_conns, max_concurrent_dials, pipeline_pool_size
	MaxRetries    = 100      // max_retries (-1: none)
	MaxBufferSize = 16 << 20 // pipeline_read/write_buffer_size, bytes
	MaxDuration   = 365 * 24 * time.Hour
)

// Check reports the first option of o outside its range, as an error
// wrapping backend.ErrInvalidOption that names the URL parameter.
func Check(o *goredis.Options) error {
	type intParam struct {
		name      string
		v, lo, hi int
	}
	for _, p := range []intParam{
		{"db", o.DB, 0, MaxDB},
		{"max_retries", o.MaxRetries, -1, MaxRetries},
		{"pool_size", o.PoolSize, 0, MaxConns},
		{"min_idle_conns", o.MinIdleConns, 0, MaxConns},
		{"max_idle_conns", o.MaxIdleConns, 0, MaxConns},
		{"max_active_conns", o.MaxActiveConns, 0, MaxConns},
		{"max_concurrent_dials", o.MaxConcurrentDials, 0, MaxConns},
		{"pipeline_pool_size", o.PipelinePoolSize, -1, MaxConns},
		{"pipeline_read_buffer_size", o.PipelineReadBufferSize, 0, MaxBufferSize},
		{"pipeline_write_buffer_size", o.PipelineWriteBufferSize, 0, MaxBufferSize},
	} {
		if p.v < p.lo || p.v > p.hi {
			return fmt.Errorf("%w: parameter %s=%d out of range [%d, %d]", backend.ErrInvalidOption, p.name, p.v, p.lo, p.hi)
		}
	}
	if o.Protocol != 0 && o.Protocol != 2 && o.Protocol != 3 {
		return fmt.Errorf("%w: parameter protocol=%d: want 2 or 3", backend.ErrInvalidOption, o.Protocol)
	}
	type durParam struct {
		name string
		v    time.Duration
	}
	for _, p := range []durParam{
		{"min_retry_backoff", o.MinRetryBackoff},
		{"max_retry_backoff", o.MaxRetryBackoff},
		{"dial_timeout", o.DialTimeout},
		{"read_timeout", o.ReadTimeout},
		{"write_timeout", o.WriteTimeout},
		{"pool_timeout", o.PoolTimeout},
		{"conn_max_idle_time", o.ConnMaxIdleTime},
		{"conn_max_lifetime", o.ConnMaxLifetime},
		{"conn_max_lifetime_jitter", o.ConnMaxLifetimeJitter},
	} {
		// ParseURL maps zero and negative values to -1 (no limit).
		if p.v != -1 && (p.v < 0 || p.v > MaxDuration) {
			return fmt.Errorf("%w: parameter %s out of range (a Go duration or whole seconds, at most %v; 0 or less for none)", backend.ErrInvalidOption, p.name, MaxDuration)
		}
	}
	if strings.ContainsAny(o.ClientName, " \r\n") {
		return fmt.Errorf("%w: parameter client_name must not contain spaces or line breaks", backend.ErrInvalidOption)
	}
	return nil
}
