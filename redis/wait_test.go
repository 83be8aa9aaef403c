package redis

import (
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWaitReplicasOptions: bad values of WithWaitReplicas and of its URL
// parameters are ErrInvalidOption, as is a client it cannot confirm on.
func TestWaitReplicasOptions(t *testing.T) {
	conformance.RefusesURLs(t,
		"redis://127.0.0.1:1/0?wait_replicas=-1",
		"redis://127.0.0.1:1/0?wait_replicas=101",
		"redis://127.0.0.1:1/0?wait_replicas=x",
		"redis://127.0.0.1:1/0?wait_replicas=1&wait_timeout=soon",
		"redis://127.0.0.1:1/0?wait_replicas=1&wait_timeout=0s",
		"redis://127.0.0.1:1/0?wait_replicas=1&wait_timeout=2m",
		"redis://127.0.0.1:1/0?wait_timeout=1s",
		"redis://127.0.0.1:1/0?wait_replicas=1&wait_timeout=5s",
		"redis://127.0.0.1:1/0?wait_replicas=1&wait_timeout=1s&read_timeout=500ms",
		"redis+cluster://127.0.0.1:1?wait_replicas=1&wait_timeout=6s",
		"redis+sentinel://127.0.0.1:1/0?master=m&wait_replicas=1&wait_timeout=2s&read_timeout=2s",
		"redis+sentinel://127.0.0.1:1/0?master=m&wait_replicas=1&wait_replicas=2",
	)
	for _, raw := range []string{
		"redis://127.0.0.1:1/0?wait_replicas=1",
		"redis://127.0.0.1:1/0?wait_replicas=0&wait_timeout=1s",
		"redis://127.0.0.1:1/0?wait_replicas=2&wait_timeout=5s&read_timeout=10s",
		"redis://127.0.0.1:1/0?wait_replicas=1&read_timeout=-1",
		"redis://127.0.0.1:1/0?wait_replicas=1&wait_timeout=4s",
		"redis+cluster://127.0.0.1:1?wait_replicas=1&wait_timeout=100ms",
		"redis+sentinel://127.0.0.1:1/0?master=m&wait_replicas=1",
	} {
		l, err := distlock.Open(t.Context(), raw)
		if err != nil {
			t.Errorf("Open(%q): %v", raw, err)
			continue
		}
		_ = l.Close()
	}
	for _, o := range []Option{WithWaitReplicas(-1, time.Second), WithWaitReplicas(1, 0), WithWaitReplicas(1, time.Hour)} {
		if _, err := New(goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}), o); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("New: %v, want ErrInvalidOption", err)
		}
	}
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if _, err := New(ring, WithWaitReplicas(1, time.Second)); !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "Ring") {
		t.Errorf("New(Ring, WithWaitReplicas): %v, want ErrInvalidOption naming the client", err)
	}
	if _, err := New(ring, WithWaitReplicas(0, 0)); err != nil {
		t.Errorf("New(Ring, WithWaitReplicas(0, 0)): %v", err)
	}
}

// TestWaitReplicasConfirms: with wait_replicas=1 and no replica an
// acquisition is refused with ErrNotReplicated and leaves nothing held;
// with a replica it is granted, and its refresh is confirmed too: with
// the replica paused the refresh fails (ErrUnavailable) instead of
// counting.
func TestWaitReplicasConfirms(t *testing.T) {
	conformance.Parallel(t)
	srv := testserver.Redis(t, testserver.RedisConfig{})
	ctx := tctx(t, time.Minute)
	url := "redis://" + srv.Addr() + "/0?prefix=wr:&wait_replicas=1&wait_timeout=" + slack.D(time.Second).String()
	l, err := distlock.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })

	_, err = l.TryAcquire(ctx, "k")
	if !errors.Is(err, ErrNotReplicated) || !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("TryAcquire without a replica: %v, want ErrNotReplicated", err)
	}
	lockKey := redislua.KeysFor("wr:", "k").Lock
	eventually(t, slack.D(5*time.Second), "the unconfirmed grant released", func() bool {
		return admin.Exists(ctx, lockKey).Val() == 0
	})

	_, port, _ := strings.Cut(srv.Addr(), ":")
	replica := testserver.Redis(t, testserver.RedisConfig{ExtraArgs: []string{"--replicaof", "127.0.0.1", port}})
	eventually(t, slack.D(20*time.Second), "the replica online", func() bool {
		info := admin.Info(ctx, "replication").Val()
		return strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	// An online replica on a loaded machine may still miss one WAIT's
	// window (the race detector starves its process); the claim is that a
	// confirmed grant comes, so unconfirmed attempts are retried for a while.
	var lease *distlock.Lease
	eventually(t, slack.D(20*time.Second), "a grant confirmed by the replica", func() bool {
		lease, err = l.TryAcquire(ctx, "k", distlock.WithAutoRefresh(false))
		// ErrNotAcquired: the last unconfirmed grant's background release
		// has not run yet.
		if err != nil && !errors.Is(err, ErrNotReplicated) && !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire with a replica: %v", err)
		}
		return err == nil
	})
	rc := goredis.NewClient(&goredis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { _ = rc.Close() })
	assert.Equal(t, int64(1), rc.Exists(ctx, lockKey).Val(), "confirmed grant not on the replica")
	eventually(t, slack.D(20*time.Second), "a refresh confirmed by the replica", func() bool {
		err := lease.Refresh(ctx, time.Minute)
		if err != nil && !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("Refresh with a replica: %v", err)
		}
		return err == nil
	})
	require.NoError(t, replica.Pause())
	err = lease.Refresh(ctx, time.Minute)
	require.NoError(t, replica.Resume())
	assert.ErrorIs(t, err, distlock.ErrUnavailable, "Refresh with the replica paused")
	require.NoError(t, lease.Release(ctx))
}

// TestWaitRefreshNotHeld: a refresh whose confirmation finds the hold gone
// (a failover to a replica that never had it, or an expiry in between)
// is ErrNotHeld, which ends the lease at once, and not ErrUnavailable,
// which a refresher waits out.
func TestWaitRefreshNotHeld(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	ctx := tctx(t, 30*time.Second)
	l, err := New(goredis.NewClient(&goredis.Options{Addr: srv.Addr()}), WithCloseClient(), WithWaitReplicas(1, slack.D(50*time.Millisecond)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	gone := &lock{d: driverOf(l), keys: redislua.KeysFor(driverOf(l).prefix, "gone"), owner: "o", hold: "hgone", token: 7}
	err = driverOf(l).confirmRefresh(ctx, gone)
	if !errors.Is(err, distlock.ErrNotHeld) || errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("confirmRefresh of a hold that is gone: %v, want ErrNotHeld and not ErrUnavailable", err)
	}
}
