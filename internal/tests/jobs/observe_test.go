package jobs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// TestObserveWakesOnRelease: on backends that announce releases to their
// waiters (backend.Notifier: redis, redlock), Observe
// reports a change of leader long before its poll interval (10 minutes
// here): the resignation at once, and the next leader by quick polls.
// Before, Observe only polled, and neither change was seen for 10 minutes.
func TestObserveWakesOnRelease(t *testing.T) {
	for _, c := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"redis", func(t *testing.T) string {
			return redisURL(t)
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
			candidates, observer := openTwo(t, c.url(t))
			a, _ := distlock.NewElection(candidates, "leader", "a")
			b, _ := distlock.NewElection(candidates, "leader", "b")
			watch, err := distlock.NewElection(observer, "leader", "observer", distlock.WithObserveInterval(10*time.Minute))
			require.NoError(t, err)
			term, err := a.Campaign(t.Context())
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			seen := watch.Observe(ctx)
			next := func(what string) distlock.LockInfo {
				t.Helper()
				select {
				case info := <-seen:
					return info
				case <-time.After(30 * time.Second):
					t.Fatalf("Observe (interval 10m) did not report %s within 30s", what)
					return distlock.LockInfo{}
				}
			}
			if info := next("the leader"); info.Metadata != "a" {
				t.Fatalf("first observation %+v, want a leading", info)
			}
			require.NoError(t, term.Resign(t.Context()))
			if info := next("the resignation"); info.Held {
				t.Fatalf("observed %+v after a resigned, want nobody leading", info)
			}
			term, err = b.Campaign(t.Context())
			require.NoError(t, err)
			defer term.Resign(context.Background())
			if info := next("the new leader"); info.Metadata != "b" || info.Token != term.Token() {
				t.Errorf("observed %+v, want b with token %d", info, term.Token())
			}
		})
	}
}
