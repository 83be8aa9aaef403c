package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/queuewait"
	"github.com/distlock/distlock/internal/queuewait/queuewaittest"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestHoldEndsBetweenJoinableAndNest: A of owner o holds; B of owner o is
// queued behind A's key on the same driver and finds A's hold joinable,
// and the hold ends before B nests in it: A releases it, or an operator
// deletes its key. B must not join a hold that is gone, nor wait behind
// it: it is granted its own key, and A (force-released) learns it lost
// the lock.
func TestHoldEndsBetweenJoinableAndNest(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	admin := adminClient(t, c.Addrs()...)
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, a backend.Lock, aKey string)
	}{
		{"released", func(t *testing.T, a backend.Lock, _ string) {
			if err := a.Release(ctxT(t, 10*time.Second)); err != nil {
				t.Error(err)
			}
		}},
		{"force-released", func(t *testing.T, _ backend.Lock, aKey string) {
			if _, err := admin.Delete(ctxT(t, 10*time.Second), aKey); err != nil {
				t.Error(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			d := driverOf(dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix)))
			ctx := ctxT(t, slack.D(20*time.Second))
			aLost := make(chan error, 1)
			a, err := d.Acquire(ctx, backend.Request{Key: "k", Owner: "o", Lost: func(err error) { aLost <- err }})
			if err != nil {
				t.Fatal(err)
			}
			aKey := d.keyOf(a.(*lock).h)

			ks := d.table.Ref("k")
			defer d.table.Unref("k", ks)
			s, err := d.session(ctx)
			if err != nil {
				t.Fatal(err)
			}
			req := backend.Request{Key: "k", Owner: "o"}
			e := d.newEntry(ctx, s, ks, d.lockPrefix("k"), req)
			first, err := e.create(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if first.CreateRevision == e.rev {
				t.Fatal("B's key is first while A holds")
			}
			b, err := queuewait.Await(ctx, queuewaittest.HookJoinable[backend.Lock, clientv3.WatchResponse](e, func() { tc.end(t, a, aKey) }))
			if err != nil {
				t.Fatalf("B, after A's hold ended between its check and its nest: %v", err)
			}
			defer func() { _ = b.Release(context.Background()) }()
			if got := b.(*lock).h.token; got != e.rev {
				t.Errorf("B holds token %d, want its own key's %d (a hold that ended was joined)", got, e.rev)
			}
			if tc.name == "force-released" {
				select {
				case err := <-aLost:
					if !errors.Is(err, errKeyGone) {
						t.Errorf("A lost its lock with %v, want errKeyGone", err)
					}
				case <-time.After(slack.D(10 * time.Second)):
					t.Error("A was not told it lost its force-released lock")
				}
			}
			keys, err := waiterKeys(ctxT(t, 5*time.Second), admin, prefix)
			if err != nil || len(keys) != 1 || keys[0] != e.key {
				t.Errorf("keys %v (%v), want B's only: %s", keys, err, e.key)
			}
		})
	}
}
