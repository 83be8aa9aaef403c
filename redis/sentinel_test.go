package redis

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// TestOpenSentinelURL: a redis+sentinel:// URL finds the primary through
// the sentinels, and follows it across a failover: after the primary is
// killed and a replica promoted, the same Locker acquires on the new one.
func TestOpenSentinelURL(t *testing.T) {
	conformance.Parallel(t)
	set := testserver.RedisSentinel(t, testserver.SentinelConfig{Replicas: 1, Sentinels: 3})
	ctx := tctx(t, 2*time.Minute)
	a, err := distlock.Open(ctx, set.URL("prefix=so:"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	b, err := distlock.Open(ctx, set.URL("prefix=so:"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	lease, err := a.TryAcquire(ctx, "k", distlock.WithAutoRefresh(false))
	require.NoError(t, err)
	if _, err := b.TryAcquire(ctx, "k"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("second Locker: %v, want ErrNotAcquired", err)
	}
	require.NoError(t, lease.Release(ctx))
	before := lease.Token()

	old := set.Nodes[0]
	require.NoError(t, old.Kill())
	if _, err := set.WaitPrimaryChange(ctx, old.Addr()); err != nil {
		t.Fatal(err)
	}
	// The client learns of the new primary from the sentinels' messages
	// or its next dial; an attempt before that may fail as unavailable.
	deadline := time.Now().Add(slack.D(30 * time.Second))
	for {
		lease, err = b.TryAcquire(ctx, "k", distlock.WithAutoRefresh(false))
		if err == nil || !errors.Is(err, distlock.ErrUnavailable) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err, "after failover")
	if lease.Token() <= before {
		t.Errorf("token %d after failover, %d before (replicated)", lease.Token(), before)
	}
	require.NoError(t, lease.Release(ctx))
}
