package etcd

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestLossMargin: a session whose keepalives stop being answered declares
// its leases lost at last contact + TTL − margin, so that loss is reported
// before the cluster can expire the lease and another client take the
// lock; not merely before the takeover, which a loss reported at last
// contact + TTL could still precede. Last contact is bounded from above by
// the moment the last answered keepalive returned.
func TestLossMargin(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	const (
		ttl    = 4 * time.Second
		margin = 1900 * time.Millisecond
	)
	// The tolerance for this process's scheduling delays stays below the
	// margin, so that a loss reported at last contact + TTL fails.
	tol := min(slack.D(time.Second), margin-400*time.Millisecond)
	var (
		broken atomic.Bool
		lastOK atomic.Int64 // when the last answered keepalive returned
	)
	errCut := errors.New("keepalive cut by the test")
	hooks := &testHooks{keepalive: func() error {
		if broken.Load() {
			return errCut
		}
		lastOK.Store(time.Now().UnixNano())
		return nil
	}}
	a := dialT(t, c.Addrs(), WithSessionTTL(ttl), WithSessionMargin(margin), WithPrefix(uniquePrefix(t)), withHooks(hooks))
	lease, err := a.Acquire(ctxT(t, 10*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, slack.D(10*time.Second), "a keepalive answered after the grant", func() bool { return lastOK.Load() != 0 })
	broken.Store(true)
	select {
	case <-lease.Done():
	case <-time.After(ttl + slack.D(5*time.Second)):
		t.Fatal("the lease did not end after its keepalives stopped")
	}
	lost := time.Now()
	if !errors.Is(lease.Err(), distlock.ErrLockLost) {
		t.Errorf("lease ended with %v, want ErrLockLost", lease.Err())
	}
	contact := time.Unix(0, lastOK.Load())
	want := contact.Add(ttl - margin)
	t.Logf("loss reported %v after the last answered keepalive (TTL %v, margin %v)", lost.Sub(contact).Round(time.Millisecond), ttl, margin)
	if late := lost.Sub(want); late > tol {
		t.Errorf("loss reported %v after last contact + TTL − margin (tolerance %v): the margin is not kept", late.Round(time.Millisecond), tol)
	}
}

// TestSlowKeepaliveKeepsSession: a cluster that answers keepalives slowly
// (here a second's round trip, well within the lease TTL, but longer than
// half the keepalive period) keeps the session: a keepalive is not given
// up while its answer may still come in time, another is sent alongside
// it meanwhile (in case its member does not answer at all).
func TestSlowKeepaliveKeepsSession(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	ttl := slack.D(4 * time.Second).Round(time.Second) // keepalive period ttl/3
	link, err := netfault.ListenGroup(c.Addrs()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	a := dialT(t, link.Addrs(), WithSessionTTL(ttl), WithPrefix(uniquePrefix(t)))
	lease, err := a.Acquire(ctxT(t, 10*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	link.SetLatency(500 * time.Millisecond) // each way
	end := time.Now().Add(2 * ttl)
	for time.Now().Before(end) {
		if err := lease.Err(); err != nil {
			t.Fatalf("the session ended with keepalives answered in about 1 s (TTL %v): %v", ttl, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	link.Heal()
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}
