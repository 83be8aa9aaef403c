package jobs_test

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
	"github.com/stretchr/testify/assert"
)

// TestDoReportsForcedReleaseDuringFn: an operator forces the lock free
// while fn runs (distlock unlock --force), and fn ends before the lease's
// next refresh. Do's final Release then finds the lock gone (ErrNotHeld
// from the backend), but runLeased drops every ErrNotHeld of Release and
// the lease's own Err is "released", so Do returns nil: the caller is told
// its work ran under the lock although another owner could take it
// halfway. Do's doc: "joined with ErrLockLost if the lock was lost while
// fn ran". On backends that tell the holder at once (memory, ZooKeeper)
// Do reports it; on these, the Release is the first to learn of it.
func TestDoReportsForcedReleaseDuringFn(t *testing.T) {
	for _, c := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"redis", func(t *testing.T) string {
			return redisURL(t)
		}},
		{"memcached", func(t *testing.T) string {
			return memcachedURL(t)
		}},
		{"redlock", func(t *testing.T) string {
			var addrs []string
			for _, s := range testserver.RedisN(t, 3) {
				addrs = append(addrs, s.Addr())
			}
			return "redlock://" + strings.Join(addrs, ",") + "/0"
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := c.url(t)
			ctx := t.Context()
			holder, op := openTwo(t, url)
			err := holder.Do(ctx, "job", func(context.Context) error {
				info, err := op.ForceRelease(ctx, "job")
				if err != nil || !info.Held {
					t.Fatalf("ForceRelease = %+v, %v", info, err)
				}
				return nil // done before the next refresh (TTL 1m)
			}, distlock.WithTTL(time.Minute))
			assert.ErrorIs(t, err, distlock.ErrLockLost, "Do whose lock was forced free while fn ran: %v; want an error wrapping ErrLockLost", err)
			ran, err := holder.TryDo(ctx, "job2", func(context.Context) error {
				_, err := op.ForceRelease(ctx, "job2")
				return err
			}, distlock.WithTTL(time.Minute))
			if !ran || !errors.Is(err, distlock.ErrLockLost) {
				t.Errorf("TryDo whose lock was forced free while fn ran: ran %v, %v; want an error wrapping ErrLockLost", ran, err)
			}
		})
	}
}
