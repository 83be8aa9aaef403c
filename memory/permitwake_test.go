package memory_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/stretchr/testify/require"
)

// permitDriver opens a memory session of namespace ns as a raw driver.
func permitDriver(t *testing.T, ns string) interface {
	backend.Driver
	backend.Notifier
} {
	t.Helper()
	open, err := backend.Lookup("mem")
	require.NoError(t, err)
	d, err := open(t.Context(), &url.URL{Scheme: "mem", Host: ns})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d.(interface {
		backend.Driver
		backend.Notifier
	})
}

// pending returns the indexes of the channels holding a wake-up, and
// drains them.
func pending(chs []<-chan struct{}) []int {
	var out []int
	for i, ch := range chs {
		select {
		case <-ch:
			out = append(out, i)
		default:
		}
	}
	return out
}

// TestPermitReleaseWakesOneWatcherPerPermit: a permit given back wakes
// one watcher of the semaphore (the longest watching), not all of them: a
// release costs one attempt, not one per waiter (2,000 waiters handing
// one permit round made 4 million wake-ups). A watcher woken that leaves
// hands its wake-up on; k permits given back at once wake k watchers.
func TestPermitReleaseWakesOneWatcherPerPermit(t *testing.T) {
	d := permitDriver(t, t.Name())
	ctx := context.Background()
	req := backend.Request{Key: "s", Owner: "o", TTL: time.Minute, Permits: 3}
	var held []backend.Lock
	for range 3 {
		p, err := d.TryAcquire(ctx, req)
		require.NoError(t, err)
		held = append(held, p)
	}
	const n = 100
	chs := make([]<-chan struct{}, n)
	cancels := make([]func(), n)
	for i := range chs {
		chs[i], cancels[i] = d.Watch(ctx, req)
		require.NotNil(t, chs[i])
	}
	defer func() {
		for _, c := range cancels {
			if c != nil {
				c()
			}
		}
	}()

	require.NoError(t, held[0].Release(ctx))
	require.Equal(t, []int{0}, pending(chs), "one release: the first watcher woken")

	// The woken watcher leaves without taking the permit: the next one is
	// woken in its place.
	cancels[0]()
	cancels[0] = nil
	require.Equal(t, []int{1}, pending(chs), "the wake-up handed on")

	// Two permits given back while the first wake-up is still pending:
	// two more watchers woken, one per permit.
	require.NoError(t, held[1].Release(ctx))
	require.NoError(t, held[2].Release(ctx))
	require.Equal(t, []int{1, 2}, pending(chs), "two releases: two watchers")
}
