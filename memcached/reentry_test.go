package memcached

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// TestNestAfterForceRelease: a Locker holds a lock under a WithOwner id;
// another Locker force-releases it and takes it. A nested acquisition on
// the first Locker with the same id must not join the lost hold: a nested
// acquisition always asks the server. Held by another owner, it is
// refused and the new holder's item is untouched. Held under the same id
// (WithOwner names one owner, whichever Locker it uses: reentrancy is by
// owner id), it joins the server's tenure, which is that owner's hold, and
// the lost lease still cannot release the new tenure.
func TestNestAfterForceRelease(t *testing.T) {
	conformance.Parallel(t)
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	for _, tc := range []struct{ name, takeover string }{
		{"another owner takes it", "other"},
		{"the same owner id takes it", "o"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, second := openURL(t, mcURL(srv, "")), openURL(t, mcURL(srv, ""))
			key := "nest-after-force/" + tc.takeover
			opts := []distlock.Option{distlock.WithOwner("o"), distlock.WithTTL(time.Minute), distlock.WithAutoRefresh(false)}
			lost, err := first.TryAcquire(ctxT(t, 10*time.Second), key, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := distlock.ForceRelease(ctxT(t, 10*time.Second), second, key); err != nil {
				t.Fatal(err)
			}
			taken, err := second.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithOwner(tc.takeover), distlock.WithTTL(time.Minute), distlock.WithAutoRefresh(false))
			if err != nil {
				t.Fatal(err)
			}
			nested, err := first.TryAcquire(ctxT(t, 10*time.Second), key, opts...)
			if tc.takeover != "o" {
				if !errors.Is(err, distlock.ErrNotAcquired) {
					t.Fatalf("nested acquisition while %q holds = %v, %v; want ErrNotAcquired", tc.takeover, nested, err)
				}
				if info := inspectT(t, second, key); info.Owner != tc.takeover || info.Holds != 1 {
					t.Errorf("after the refused nest: %+v, want %q's single hold", info, tc.takeover)
				}
			} else {
				if err != nil {
					t.Fatalf("nested acquisition of owner %q, which holds the lock: %v", "o", err)
				}
				if info := inspectT(t, second, key); info.Owner != "o" || info.Holds != 2 {
					t.Errorf("after the nest: %+v, want owner o with 2 holds (the new tenure's)", info)
				}
				if err := nested.Release(ctxT(t, 10*time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			if err := lost.Release(ctxT(t, 10*time.Second)); !errors.Is(err, distlock.ErrNotHeld) {
				t.Errorf("the force-released lease's Release = %v, want ErrNotHeld", err)
			}
			if info := inspectT(t, second, key); !info.Held || info.Owner != tc.takeover || info.Holds != 1 {
				t.Errorf("the new holder's lock after the lost lease's calls: %+v", info)
			}
			if err := taken.Release(ctxT(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
