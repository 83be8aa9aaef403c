package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// TestObserveEndsWhenLockerCloses: Observe's doc says a closed Locker
// closes the channel; on real backends the poll after Close must see
// ErrClosed (not an error that is skipped and polled again until ctx).
func TestObserveEndsWhenLockerCloses(t *testing.T) {
	for _, b := range []struct {
		name string
		url  func(t *testing.T) string
	}{{"memory", func(*testing.T) string { return "mem://observe-close" }}, {"redis", redisURL}, {"zookeeper", zkURL},
		{"memcached", memcachedURL}, {"mysql-forupdate", mysqlURL}, {"postgres-advisory", postgresURL}} {
		t.Run(b.name, func(t *testing.T) {
			l, err := distlock.Open(t.Context(), b.url(t))
			if err != nil {
				t.Fatal(err)
			}
			e := election(t, l, "leader", "host-a", distlock.WithObserveInterval(10*time.Millisecond))
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			ch := e.Observe(ctx)
			if info, ok := <-ch; !ok || info.Held {
				t.Fatalf("first observation: %+v, %v; want nobody leading", info, ok)
			}
			term, err := e.Campaign(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info := <-ch; !info.Held || info.Token != term.Token() {
				t.Errorf("second observation: %+v; want the term (token %d)", info, term.Token())
			}
			_ = l.Close()
			for range ch {
			}
			if ctx.Err() != nil {
				t.Errorf("Observe's channel stayed open after the Locker closed, until ctx ended")
			}
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
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // polls fail meanwhile
	select {
	case info, ok := <-ch:
		t.Fatalf("during the outage: %+v, %v; want nothing", info, ok)
	default:
	}
	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	term, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info, ok := <-ch; !ok || !info.Held || info.Token != term.Token() {
		t.Errorf("after the outage: %+v, %v; want the new term (token %d)", info, ok, term.Token())
	}
	cancel()
	for range ch {
	}
}
