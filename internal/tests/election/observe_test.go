package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestObserveEndsWhenLockerCloses: Observe's doc says a closed Locker
// closes the channel; on real backends the poll after Close must see
// ErrClosed (not an error that is skipped and polled again until ctx).
func TestObserveEndsWhenLockerCloses(t *testing.T) {
	for _, b := range append(candidateBackends[:3:3], backend{"memcached", memcachedURL},
		backend{"mysql-forupdate", mysqlURL}, backend{"postgres-advisory", postgresURL}) {
		t.Run(b.name, func(t *testing.T) {
			l, err := distlock.Open(t.Context(), b.url(t))
			require.NoError(t, err)
			e := election(t, l, "leader", "host-a", distlock.WithObserveInterval(10*time.Millisecond))
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			ch := e.Observe(ctx)
			if info, ok := <-ch; !ok || info.Held {
				t.Fatalf("first observation: %+v, %v; want nobody leading", info, ok)
			}
			term, err := e.Campaign(ctx)
			require.NoError(t, err)
			if info := <-ch; !info.Held || info.Token != term.Token() {
				t.Errorf("second observation: %+v; want the term (token %d)", info, term.Token())
			}
			_ = l.Close()
			for range ch {
			}
			assert.NoError(t, ctx.Err(), "Observe's channel stayed open after the Locker closed, until ctx ended")
		})
	}
}

// TestObserveRidesOutBackendOutage: the backend goes down while Observe
// polls: errors are skipped and the channel stays open; when it is back,
// the next change is reported; ctx ending closes the channel.
func TestObserveRidesOutBackendOutage(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	l := open(t, "redis://"+srv.Addr()+"/0")
	e := election(t, l, "leader", "host-a", distlock.WithObserveInterval(10*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ch := e.Observe(ctx)
	if info := <-ch; info.Held {
		t.Fatalf("first observation: %+v, want nobody leading", info)
	}
	require.NoError(t, srv.Kill())
	time.Sleep(200 * time.Millisecond) // polls fail meanwhile
	select {
	case info, ok := <-ch:
		t.Fatalf("during the outage: %+v, %v; want nothing", info, ok)
	default:
	}
	require.NoError(t, srv.Restart(t.Context()))
	term, err := e.Campaign(ctx)
	require.NoError(t, err)
	if info, ok := <-ch; !ok || !info.Held || info.Token != term.Token() {
		t.Errorf("after the outage: %+v, %v; want the new term (token %d)", info, ok, term.Token())
	}
	cancel()
	for range ch {
	}
}
