package etcd

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// TestRestartHoldingAndWaiting: real server restarts — of the whole
// cluster (with its data) and of one member (the leader) — while one
// client holds a lock and another waits for it. Throughout, no second
// owner gets the lock (the waiter keeps waiting, a rival is refused, the
// holder's lease stays live with its token); after the holder's release
// the waiter gets it with a higher token; and once the Lockers are closed
// no waiter key and none of their session leases is left on the cluster.
func TestRestartHoldingAndWaiting(t *testing.T) {
	t.Parallel()
	c := exclusiveCluster(t)
	needControl(t)
	admin := adminClient(t, c.Addrs()...)
	for _, tc := range []struct {
		name    string
		restart func(ctx context.Context) error
	}{
		{"cluster", func(ctx context.Context) error {
			if err := stopCluster(c); err != nil {
				return err
			}
			return startCluster(ctx, c)
		}},
		{"member", func(ctx context.Context) error {
			leader, err := testserver.EtcdLeader(ctx, c)
			if err != nil {
				return err
			}
			if err := leader.Kill(); err != nil {
				return err
			}
			return leader.Restart(ctx)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Long enough that no session ends during the restart.
			const ttl = 15 * time.Second
			prefix := uniquePrefix(t)
			dial := func() *distlock.Locker {
				l, err := Dial(c.Addrs(), WithSessionTTL(ttl), WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				return l
			}
			holder, waiter, rival := dial(), dial(), dial()
			var inside, overlaps atomic.Int32
			lease, err := holder.Acquire(ctxT(t, 10*time.Second), "k")
			if err != nil {
				t.Fatal(err)
			}
			inside.Add(1)
			got := make(chan *distlock.Lease, 1)
			failed := make(chan error, 1)
			go func() {
				l, err := waiter.Acquire(ctxT(t, 2*time.Minute), "k")
				if err != nil {
					failed <- err
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				got <- l
			}()
			waitFor(t, slack.D(10*time.Second), "the waiter queued", func() bool {
				info, err := rival.Inspect(t.Context(), "k")
				return err == nil && info.Waiters == 1
			})
			start := time.Now()
			if err := tc.restart(ctxT(t, time.Minute)); err != nil {
				t.Fatal(err)
			}
			t.Logf("restart took %v", time.Since(start).Round(time.Millisecond))
			expectBusy(t, rival, "k", "after the restart")
			select {
			case l := <-got:
				t.Fatalf("the waiter acquired (token %d) while the holder's lease (token %d) was live", l.Token(), lease.Token())
			case err := <-failed:
				t.Fatalf("the waiter gave up during the restart: %v", err)
			default:
			}
			if err := lease.Err(); err != nil {
				t.Fatalf("the holder's lease ended with the restart: %v", err)
			}
			info, err := rival.Inspect(ctxT(t, 10*time.Second), "k")
			if err != nil {
				t.Fatal(err)
			}
			if info.Token != lease.Token() || info.Waiters != 1 {
				t.Errorf("after the restart: %+v, want the holder's token %d and 1 waiter", info, lease.Token())
			}
			inside.Add(-1)
			if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
				t.Fatalf("Release after the restart: %v", err)
			}
			var next *distlock.Lease
			select {
			case next = <-got:
			case err := <-failed:
				t.Fatalf("waiter: %v", err)
			case <-time.After(slack.D(30 * time.Second)):
				t.Fatal("the waiter did not get the lock after the release")
			}
			if next.Token() <= lease.Token() {
				t.Errorf("waiter's token %d after the holder's %d", next.Token(), lease.Token())
			}
			inside.Add(-1)
			if err := next.Release(ctxT(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			if n := overlaps.Load(); n != 0 {
				t.Errorf("%d overlapping holds", n)
			}
			var ids []clientv3.LeaseID
			for _, l := range []*distlock.Locker{holder, waiter, rival} {
				if id := sessionOf(l).LeaseID(); id != 0 {
					ids = append(ids, id)
				}
				if err := l.Close(); err != nil {
					t.Error(err)
				}
			}
			waitFor(t, slack.D(20*time.Second), "no waiter key and no session lease left", func() bool {
				keys, err := waiterKeys(t.Context(), admin, prefix)
				if err != nil || len(keys) != 0 {
					return false
				}
				for _, id := range ids {
					resp, err := admin.TimeToLive(t.Context(), id)
					if err != nil || resp.TTL != -1 {
						return false
					}
				}
				return true
			})
		})
	}
}
