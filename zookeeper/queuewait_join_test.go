package zookeeper

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/queuewait"
	"github.com/distlock/distlock/internal/queuewait/queuewaittest"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestHoldEndsBetweenJoinableAndNest: A of owner o holds; B of owner o is
// queued behind A's node on the same driver and finds A's hold joinable,
// and the hold ends before B nests in it: A releases it, or an operator
// deletes its node. B must not join a hold that is gone, nor wait behind
// it: it is granted its own node, and A (force-released) learns it lost
// the lock.
func TestHoldEndsBetweenJoinableAndNest(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	admin := adminConn(t, s.Addr())
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, a backend.Lock)
	}{
		{"released", func(t *testing.T, a backend.Lock) {
			if err := a.Release(ctxT(t, 10*time.Second)); err != nil {
				t.Error(err)
			}
		}},
		{"force-released", func(t *testing.T, a backend.Lock) {
			if err := admin.Delete(a.(*lock).h.path, -1); err != nil {
				t.Error(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := uniqueBase(t)
			d := driverOf(dialT(t, []string{s.Addr()}, WithBasePath(base)))
			ctx := ctxT(t, slack.D(20*time.Second))
			aLost := make(chan error, 1)
			a, err := d.Acquire(ctx, backend.Request{Key: "k", Owner: "o", Lost: func(err error) { aLost <- err }})
			if err != nil {
				t.Fatal(err)
			}

			// B's attempt, as attempt makes it, waiting with a hooked entry.
			ks := d.table.Ref("k")
			defer d.table.Unref("k", ks)
			sess, err := d.session(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer d.unuse(sess)
			req := backend.Request{Key: "k", Owner: "o"}
			e := d.newEntry(ctx, sess, ks, d.parentPath("k"), req)
			child, err := d.protectedCreate(ctx, sess, e.parent, e.guid, encodeNode(req.Owner, req.Metadata, 1))
			if err != nil {
				t.Fatal(err)
			}
			e.child, e.path = child, e.parent+"/"+child
			e.stat = d.start(ctx, sess, func(c *zk.Conn) error {
				_, st, w, err := c.GetW(e.path)
				if errors.Is(err, zk.ErrNoNode) {
					return nil
				}
				e.exists, e.st, e.watch = err == nil, st, w
				return err
			})
			b, err := queuewait.Await(ctx, queuewaittest.HookJoinable[backend.Lock, zk.Event](e, func() { tc.end(t, a) }))
			if err != nil {
				t.Fatalf("B, after A's hold ended between its check and its nest: %v", err)
			}
			defer func() { _ = b.Release(context.Background()) }()
			if b.(*lock).h.path != e.path {
				t.Errorf("B holds through %s, want its own node %s (a hold that ended was joined)", b.(*lock).h.path, e.path)
			}
			if tc.name == "force-released" {
				select {
				case err := <-aLost:
					if !errors.Is(err, errNodeDeleted) {
						t.Errorf("A lost its lock with %v, want errNodeDeleted", err)
					}
				case <-time.After(slack.D(10 * time.Second)):
					t.Error("A was not told it lost its force-released lock")
				}
			}
			if nodes := lockNodes(t, admin, base, "k"); len(nodes) != 1 || nodes[0] != e.child {
				t.Errorf("nodes %v, want B's only: %s", nodes, e.child)
			}
		})
	}
}
