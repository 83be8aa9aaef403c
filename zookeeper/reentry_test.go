package zookeeper

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
)

// TestNestAfterForceRelease: a Locker holds a lock under a WithOwner id;
// another Locker force-releases it and takes it. A nested acquisition on
// the first Locker with the same id must not join the lost hold, whether
// or not its hold watch has seen the deletion yet: joining rewrites the
// node, which the server refuses for a deleted node. Reentrancy is per
// Locker (session), so the new holder's node is an ordinary competitor
// even under the same id, and the first Locker's TryAcquire is refused.
func TestNestAfterForceRelease(t *testing.T) {
	conformance.Parallel(t)
	s := standalone(t)
	addrs := []string{s.Addr()}
	for _, tc := range []struct{ name, takeover string }{
		{"another owner takes it", "other"},
		{"the same owner id takes it", "o"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := uniqueBase(t)
			first, second := dialT(t, addrs, WithBasePath(base)), dialT(t, addrs, WithBasePath(base))
			const key = "nest-after-force"
			opt := distlock.WithOwner("o")
			lost, err := first.TryAcquire(ctxT(t, 10*time.Second), key, opt)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := second.ForceRelease(ctxT(t, 10*time.Second), key); err != nil {
				t.Fatal(err)
			}
			taken, err := second.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithOwner(tc.takeover))
			if err != nil {
				t.Fatal(err)
			}
			nested, err := first.TryAcquire(ctxT(t, 10*time.Second), key, opt)
			if !errors.Is(err, distlock.ErrNotAcquired) {
				t.Fatalf("nested acquisition on the force-released Locker while %q holds through another = %v, %v; want ErrNotAcquired", tc.takeover, nested, err)
			}
			select {
			case <-lost.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the force-released lease still looks held")
			}
			if err := lost.Release(ctxT(t, 10*time.Second)); !errors.Is(err, distlock.ErrNotHeld) {
				t.Errorf("the force-released lease's Release = %v, want ErrNotHeld", err)
			}
			if info := inspectT(t, second, key); !info.Held || info.Owner != tc.takeover || info.Holds != 1 || info.Token != taken.Token() {
				t.Errorf("the new holder's lock after the lost lease's calls: %+v", info)
			}
			if err := taken.Release(ctxT(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
