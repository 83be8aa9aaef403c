package memcached

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The seeds' scenario (003, and 000's single-instance discussion) with
// direct inspection: A's lock expires, B acquires, and A's Release and
// Refresh must leave B's item exactly as it was. The driver is called
// directly, below distlock's lease state (which would answer ErrNotHeld
// without asking the server once A's validity has passed), so the calls do
// reach memcached and it is the server-side owner check that is tested.
func TestSeedsScenario(t *testing.T) {
	conformance.Parallel(t)
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	admin := adminClient(t, srv.Addr())
	for _, release := range []string{"auto", "cas"} {
		t.Run(release, func(t *testing.T) {
			a := openDriver(t, mcURL(srv, "release="+release))
			b := openDriver(t, mcURL(srv, "release="+release))
			key := "seeds/" + release
			ik := ItemKey(DefaultPrefix, key)
			ctx := ctxT(t, 30*time.Second)
			la, err := a.TryAcquire(ctx, req(key, "A", 2*time.Second))
			require.NoError(t, err)
			if !waitFor(5*time.Second, func() bool { _, err := admin.Get(ik); return errors.Is(err, memcache.ErrCacheMiss) }) {
				t.Fatalf("A's item did not expire within 5s of its 2s TTL")
			}
			lb, err := b.TryAcquire(ctx, req(key, "B", time.Minute))
			require.NoError(t, err, "B after A's expiry")
			recB, itB := readRecord(t, admin, ik)
			require.Equal(t, "B", recB.owner, "item owner %q, want B", recB.owner)
			assert.ErrorIs(t, la.Release(ctx), backend.ErrNotHeld, "A's Release after expiry")
			assert.ErrorIs(t, la.Refresh(ctx, time.Hour), backend.ErrNotHeld, "A's Refresh after expiry")
			_, after := readRecord(t, admin, ik)
			if after.CasID != itB.CasID || string(after.Value) != string(itB.Value) {
				t.Errorf("B's item changed by A's stale calls: %q (cas %d) -> %q (cas %d)", itB.Value, itB.CasID, after.Value, after.CasID)
			}
			if secs, _ := remainingTTL(t, srv.Addr(), ik); secs > 61 {
				t.Errorf("B's expiry extended to %ds by A's stale Refresh", secs)
			}
			require.NoError(t, lb.Release(ctx), "B's Release")
			if _, err := admin.Get(ik); !errors.Is(err, memcache.ErrCacheMiss) {
				t.Errorf("item after B's Release: %v, want a miss", err)
			}
		})
	}
}

// The same seeds scenario through the public API: A's lease ends on its own
// no later than B can acquire, and A's stale calls get ErrNotHeld.
func TestSeedsScenarioLeases(t *testing.T) {
	conformance.Parallel(t)
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	admin := adminClient(t, srv.Addr())
	a, b := openURL(t, mcURL(srv, "")), openURL(t, mcURL(srv, ""))
	key := "seeds/leases"
	la, err := a.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithTTL(2*time.Second), distlock.WithAutoRefresh(false))
	require.NoError(t, err)
	lb, err := b.Acquire(ctxT(t, 10*time.Second), key)
	require.NoError(t, err)
	select {
	case <-la.Done():
	default:
		t.Fatalf("B acquired while A's lease was still open")
	}
	assert.ErrorIs(t, la.Err(), distlock.ErrLockLost, "A ended")
	_, itB := readRecord(t, admin, ItemKey(DefaultPrefix, key))
	assert.ErrorIs(t, la.Release(ctxT(t, 5*time.Second)), distlock.ErrNotHeld, "A's Release")
	assert.ErrorIs(t, la.Refresh(ctxT(t, 5*time.Second), time.Minute), distlock.ErrNotHeld, "A's Refresh")
	_, after := readRecord(t, admin, ItemKey(DefaultPrefix, key))
	assert.Equal(t, itB.CasID, after.CasID, "B's item rewritten by A's stale calls")
	require.NoError(t, lb.Release(ctxT(t, 5*time.Second)))
}

// A later tenure of the same WithOwner id is a different acquisition: a
// stale handle from the earlier tenure can neither release nor refresh it,
// because the per-tenure nonce differs. Nested holds of one tenure share its
// nonce, each with its own hold id.
func TestTenureNonce(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	admin := adminClient(t, srv.Addr())
	d := openDriver(t, mcURL(srv, ""))
	ctx := ctxT(t, 30*time.Second)
	key := "tenure"
	ik := ItemKey(DefaultPrefix, key)

	first, err := d.TryAcquire(ctx, req(key, "worker-1", time.Minute))
	require.NoError(t, err)
	nested, err := d.TryAcquire(ctx, req(key, "worker-1", time.Minute))
	require.NoError(t, err, "nested acquire")
	rec, _ := readRecord(t, admin, ik)
	f, n := first.(*lock), nested.(*lock)
	if f.tenure != n.tenure || rec.tenure != f.tenure {
		t.Errorf("nested holds do not share the tenure nonce: %q %q (item %q)", f.tenure, n.tenure, rec.tenure)
	}
	if f.hold == n.hold || len(rec.holds) != 2 || !rec.has(f.hold) || !rec.has(n.hold) {
		t.Errorf("holds %v, want the two distinct holds %q and %q", rec.holds, f.hold, n.hold)
	}
	require.NoError(t, n.Release(ctx))
	if rec, _ = readRecord(t, admin, ik); len(rec.holds) != 1 || rec.holds[0] != f.hold {
		t.Errorf("after the nested release: holds %v, want [%s]", rec.holds, f.hold)
	}
	assert.ErrorIs(t, n.Release(ctx), backend.ErrNotHeld, "second release of the nested hold")

	// The lock is lost (deleted behind the holder's back) and the same
	// owner id acquires again: a new tenure.
	require.NoError(t, admin.Delete(ik))
	second, err := d.TryAcquire(ctx, req(key, "worker-1", time.Minute))
	require.NoError(t, err)
	_, before := readRecord(t, admin, ik)
	assert.ErrorIs(t, first.Refresh(ctx, time.Hour), backend.ErrNotHeld, "stale tenure's Refresh")
	assert.ErrorIs(t, first.Release(ctx), backend.ErrNotHeld, "stale tenure's Release")
	if _, after := readRecord(t, admin, ik); after.CasID != before.CasID {
		t.Errorf("the new tenure's item was rewritten by the stale handle")
	}
	require.NoError(t, second.Release(ctx))
}

// Nested holds of one owner, taken and released concurrently from two
// Lockers: compare-and-swap keeps every hold, another owner never gets in
// while one is held, and the lock is free when all are released.
func TestReentrantConcurrent(t *testing.T) {
	conformance.Parallel(t)
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	admin := adminClient(t, srv.Addr())
	ls := []*distlock.Locker{openURL(t, mcURL(srv, "")), openURL(t, mcURL(srv, ""))}
	other := openURL(t, mcURL(srv, ""))
	const key, owner = "reentrant/concurrent", "shared-owner"
	ctx := ctxT(t, time.Minute)
	anchor, err := ls[0].TryAcquire(ctx, key, distlock.WithOwner(owner))
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 8 {
		l := ls[g%2]
		wg.Go(func() {
			for range 20 {
				lease, err := l.TryAcquire(ctx, key, distlock.WithOwner(owner))
				if err != nil {
					errs <- err
					return
				}
				if err := lease.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if lease, err := other.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
				if lease != nil {
					_ = lease.Release(ctx)
				}
				errs <- errors.New("another owner acquired while the owner held the lock")
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	rec, _ := readRecord(t, admin, ItemKey(DefaultPrefix, key))
	assert.Len(t, rec.holds, 1, "%d holds left, want the anchor's only: %v", len(rec.holds), rec.holds)
	require.NoError(t, anchor.Release(ctx))
	lease, err := other.TryAcquire(ctx, key)
	require.NoError(t, err, "lock not free after every hold was released")
	_ = lease.Release(ctx)
}

// TestQueuedSameOwnerNestsAtOnce (issue 14 defect 9 on a polling backend):
// two acquisitions by owner O wait behind another holder; when one of them
// is granted the lock, the other — already waiting, asleep in its 2 s poll
// 1 s out of step with the first's
// — nests at once instead of at its next poll, as a new acquisition by O
// would at that moment. Before the fix the second one waited for its poll.
func TestQueuedSameOwnerNestsAtOnce(t *testing.T) {
	conformance.Parallel(t)
	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	cd := &countingDriver{driver: openDriver(t, "memcached://"+srv.Addr())}
	l := distlock.New(cd, "memcached")
	t.Cleanup(func() { _ = l.Close() })
	ctx := ctxT(t, 30*time.Second)
	const key = "owner-wait"
	other, err := l.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second))
	require.NoError(t, err)
	slow := distlock.WithRetry(distlock.Backoff{Min: 2 * time.Second, Max: 2 * time.Second})
	type grant struct {
		ls  *distlock.Lease
		err error
		at  time.Time
	}
	got := make(chan grant, 2)
	for i := range 2 {
		go func() {
			// Polls 1 s apart: the first at 0, 2, 4 s, the second at 1, 3, 5 s.
			time.Sleep(time.Duration(i) * time.Second)
			ls, err := l.Acquire(ctx, key, distlock.WithOwner("O"), distlock.WithTTL(10*time.Second), slow)
			got <- grant{ls, err, time.Now()}
		}()
	}
	// Both have failed once and sleep in their poll (the first attempt was
	// other's).
	if !waitFor(5*time.Second, func() bool { return cd.attempts.Load() >= 3 }) {
		t.Fatalf("%d attempts after 5s, want 3", cd.attempts.Load())
	}
	require.NoError(t, other.Release(ctx))
	first := <-got
	require.NoError(t, first.err)
	select {
	case second := <-got:
		require.NoError(t, second.err)
		if gap := second.at.Sub(first.at); gap > 400*time.Millisecond {
			t.Errorf("second acquisition of the holding owner came %v after the first", gap)
		}
		assert.Equal(t, first.ls.Token(), second.ls.Token(), "nested hold has token %d, holder %d", second.ls.Token(), first.ls.Token())
		_ = second.ls.Release(ctx)
	case <-time.After(3 * time.Second):
		t.Fatalf("second acquisition of the holding owner still waiting 3s after the first was granted")
	}
	_ = first.ls.Release(ctx)
}

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
			require.NoError(t, err)
			if _, err := second.ForceRelease(ctxT(t, 10*time.Second), key); err != nil {
				t.Fatal(err)
			}
			taken, err := second.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithOwner(tc.takeover), distlock.WithTTL(time.Minute), distlock.WithAutoRefresh(false))
			require.NoError(t, err)
			nested, err := first.TryAcquire(ctxT(t, 10*time.Second), key, opts...)
			if tc.takeover != "o" {
				require.ErrorIs(t, err, distlock.ErrNotAcquired, "nested acquisition while %q holds = %v", tc.takeover, nested)
				if info := inspectT(t, second, key); info.Owner != tc.takeover || info.Holds != 1 {
					t.Errorf("after the refused nest: %+v, want %q's single hold", info, tc.takeover)
				}
			} else {
				require.NoError(t, err, "nested acquisition of owner %q, which holds the lock", "o")
				if info := inspectT(t, second, key); info.Owner != "o" || info.Holds != 2 {
					t.Errorf("after the nest: %+v, want owner o with 2 holds (the new tenure's)", info)
				}
				require.NoError(t, nested.Release(ctxT(t, 10*time.Second)))
			}
			assert.ErrorIs(t, lost.Release(ctxT(t, 10*time.Second)), distlock.ErrNotHeld, "the force-released lease's Release")
			if info := inspectT(t, second, key); !info.Held || info.Owner != tc.takeover || info.Holds != 1 {
				t.Errorf("the new holder's lock after the lost lease's calls: %+v", info)
			}
			require.NoError(t, taken.Release(ctxT(t, 10*time.Second)))
		})
	}
}
