package redis

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redissub/redialgate"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMinHoldReleaseWakesWaiter: a release within a minimum hold
// (WithMinHold) shortens the lock's life from its minute-long TTL to the
// rest of the minimum hold, and the lock then expires unreleased. A waiter
// that attempted against the minute-long TTL sleeps until then (its retry
// delay is a minute too) unless the shortening release wakes it: its ctx
// ends after 20s. Both shapes: the lease's own release (release_after.lua)
// and the last release of a nested owner after an earlier one set the
// minimum hold (release.lua's lingering path).
func TestMinHoldReleaseWakesWaiter(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testMinHoldReleaseWakesWaiter(t, false) })
	t.Run("fair", func(t *testing.T) { testMinHoldReleaseWakesWaiter(t, true) })
}

func testMinHoldReleaseWakesWaiter(t *testing.T, fair bool) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	var opts []Option
	if fair {
		opts = append(opts, WithFair())
	}
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()}, opts...)
	waiter := newTestLocker(t, &goredis.Options{Addr: srv.Addr()}, opts...)
	admin := adminClient(t, srv.Addr())
	ctx := tctx(t, 2*time.Minute)
	long := distlock.WithTTL(time.Minute)
	for _, nested := range []bool{false, true} {
		key := "lostwake/minhold"
		if nested {
			key += "/nested"
		}
		h, err := holder.TryAcquire(ctx, key, long, distlock.WithMinHold(time.Second), distlock.WithOwner("h"))
		require.NoError(t, err)
		var inner *distlock.Lease
		if nested {
			if inner, err = holder.TryAcquire(ctx, key, long, distlock.WithOwner("h")); err != nil {
				t.Fatal(err)
			}
		}
		var got <-chan error
		if fair {
			got = startWaiter(tctx(t, 20*time.Second), t, waiter, key)
			time.Sleep(500 * time.Millisecond) // the waiter queues (a fair lock is not marked)
		} else {
			got = waitFor(tctx(t, 20*time.Second), t, waiter, admin, key)
		}
		require.NoError(t, h.Release(ctx))
		if nested {
			require.NoError(t, inner.Release(ctx))
		}
		require.NoError(t, <-got, "nested=%v: waiter not woken when the minimum hold cut the lock's life short", nested)
	}
}

// TestBlockedObserverHoldsNoWakeUp: an Election observer and a waiter of
// one Locker watch the same lock. The observer, whose reader does not read
// its channel, sits blocked on its send, registered (armed) ahead of the
// waiter. The holder's release must still wake the waiter: a wake-up given
// to an observer that neither attempts nor leaves would be lost until the
// waiter's minute-long TTL fallback (its ctx ends after 20s).
func TestBlockedObserverHoldsNoWakeUp(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	holders := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	admin := adminClient(t, srv.Addr())
	ctx := tctx(t, 2*time.Minute)
	long := distlock.WithTTL(time.Minute)
	const key = "lostwake/observer"
	k := l.d.keys(key)

	h, err := holders.TryAcquire(ctx, key, long)
	require.NoError(t, err)
	observer, err := distlock.NewElection(l.Locker, key, "observer", distlock.WithObserveInterval(time.Minute))
	require.NoError(t, err)
	_ = observer.Observe(ctx) // never read: its buffer of one takes the first look, the next send blocks
	eventually(t, 10*time.Second, "the observer marks the lock", func() bool { return admin.HExists(ctx, k.Lock, "w").Val() })
	require.NoError(t, h.Release(ctx))
	// Woken, the observer arms again (ahead of any later waiter), sees
	// the lock free and blocks sending that.
	eventually(t, 10*time.Second, "the observer is woken", func() bool { return l.d.sub.Stats().Wakes >= 1 })
	eventually(t, 10*time.Second, "the observer arms again", func() bool { return l.d.sub.Watching(k.Channel) })
	time.Sleep(200 * time.Millisecond) // its look and blocked send

	h, err = holders.TryAcquire(ctx, key, long)
	require.NoError(t, err)
	got := waitFor(tctx(t, 20*time.Second), t, l, admin, key)
	require.NoError(t, h.Release(ctx))
	require.NoError(t, <-got, "waiter not woken: the release's wake-up went to the blocked observer")
}

// startWaiter starts an Acquire of key on l (a minute-long retry delay
// and TTL, bounded by wctx, released at once) and returns its outcome's
// channel.
func startWaiter(wctx context.Context, t *testing.T, l *testLocker, key string) <-chan error {
	got := make(chan error, 1)
	ctx := t.Context()
	go func() {
		w, err := l.Acquire(wctx, key, distlock.WithRetry(distlock.Backoff{Min: time.Minute, Max: time.Minute}), distlock.WithTTL(time.Minute))
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	return got
}

// waitFor is startWaiter returning once the waiter's busy attempt has
// marked the lock (plus a moment for it to subscribe and attempt again,
// which marks as well).
func waitFor(wctx context.Context, t *testing.T, l *testLocker, admin *goredis.Client, key string) <-chan error {
	t.Helper()
	got := startWaiter(wctx, t, l, key)
	eventually(t, 10*time.Second, "the waiter marks the lock", func() bool { return admin.HExists(t.Context(), l.d.keys(key).Lock, "w").Val() })
	time.Sleep(100 * time.Millisecond)
	return got
}

// TestWakeUpsReachWaiters: shapes of release in which every waiter must
// be woken by a publication (each waiter's ctx ends after 20s; the TTLs
// and retry delays are a minute): nested holds of one owner released one
// by one; ForceRelease; waiters of two Lockers (two processes) behind one
// holder and behind each other; a woken head that gives up before it
// attempts, handing its wake-up on.
func TestWakeUpsReachWaiters(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	a := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	b := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, 3*time.Minute)
	long := distlock.WithTTL(time.Minute)
	bounded := func() context.Context { return tctx(t, 20*time.Second) }
	check := func(what string, got <-chan error) {
		t.Helper()
		require.NoError(t, <-got, "%s: waiter not woken", what)
	}

	t.Run("nested", func(t *testing.T) {
		const key = "lostwake/nested"
		h1, err := holder.TryAcquire(ctx, key, long, distlock.WithOwner("o"))
		require.NoError(t, err)
		h2, err := holder.TryAcquire(ctx, key, long, distlock.WithOwner("o"))
		require.NoError(t, err)
		got := waitFor(bounded(), t, a, admin, key)
		require.NoError(t, h1.Release(ctx))
		require.NoError(t, h2.Release(ctx))
		check("nested holds released one by one", got)
	})

	t.Run("force", func(t *testing.T) {
		const key = "lostwake/force"
		if _, err := holder.TryAcquire(ctx, key, long); err != nil {
			t.Fatal(err)
		}
		got := waitFor(bounded(), t, a, admin, key)
		if _, err := holder.ForceRelease(ctx, key); err != nil {
			t.Fatal(err)
		}
		check("ForceRelease", got)
	})

	t.Run("two lockers", func(t *testing.T) {
		const key = "lostwake/two"
		h, err := holder.TryAcquire(ctx, key, long)
		require.NoError(t, err)
		wctx := bounded()
		got := []<-chan error{waitFor(wctx, t, a, admin, key), waitFor(wctx, t, a, admin, key), waitFor(wctx, t, b, admin, key), waitFor(wctx, t, b, admin, key)}
		require.NoError(t, h.Release(ctx))
		for i, g := range got {
			check("waiter "+string(rune('0'+i))+" of two Lockers", g)
		}
	})

	t.Run("head gives up", func(t *testing.T) {
		const key = "lostwake/giveup"
		h, err := holder.TryAcquire(ctx, key, long)
		require.NoError(t, err)
		// The head's ctx ends right after the release (it may be woken
		// first or not); the second waiter must still acquire.
		hctx, hcancel := context.WithCancel(ctx)
		head := waitFor(hctx, t, a, admin, key)
		got := waitFor(bounded(), t, a, admin, key)
		require.NoError(t, h.Release(ctx))
		hcancel()
		<-head
		check("the waiter behind a head that gave up", got)
	})
}

// TestObserverSeesHandoverWithoutWaiter: the leader of one Locker resigns
// and a candidate of another takes the term by TryAcquire at once (no
// waiter, so its lock is not marked when taken); the observer (a third
// Locker) must still be woken by the second leader's resignation — its own
// look marked that lock — long before its minute-long observe interval
// (its ctx ends after 20s).
func TestObserverSeesHandoverWithoutWaiter(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	l1 := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	l2 := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	lo := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, time.Minute)
	long := distlock.WithTTL(time.Minute)
	const key = "lostwake/handover"
	e1, err := distlock.NewElection(l1.Locker, key, "one", distlock.WithTermOptions(long))
	require.NoError(t, err)
	observer, err := distlock.NewElection(lo.Locker, key, "observer", distlock.WithObserveInterval(time.Minute))
	require.NoError(t, err)
	term, err := e1.Campaign(ctx)
	require.NoError(t, err)
	seen := observer.Observe(tctx(t, 20*time.Second))
	if info := <-seen; !info.Held || info.Token != term.Token() {
		t.Fatalf("observer saw %+v first, want leader one's term %d", info, term.Token())
	}
	require.NoError(t, term.Resign(ctx))
	second, err := l2.TryAcquire(ctx, key, long, distlock.WithOwner("two"))
	require.NoError(t, err)
	for {
		info, ok := <-seen
		require.True(t, ok, "observer never saw leader two within 20s")
		if info.Held && info.Token == second.Token() {
			break
		}
	}
	require.NoError(t, second.Release(ctx))
	if info, ok := <-seen; !ok || info.Held {
		t.Fatalf("observer not told of leader two's release before its interval (%+v, %v)", info, ok)
	}
}

// TestReleaseWhileResubscribingWakesWaiter: the waiter's pub/sub
// connection breaks; woken by the break, the waiter attempts again (busy:
// it then sleeps for the holder's minute-long TTL), and the holder releases
// right after that attempt. Either the publication reaches the new
// connection (go-redis resubscribes as it reports the break) or the
// resubscription must wake the waiter again (its ctx ends after 20s).
func TestReleaseWhileResubscribingWakesWaiter(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	w := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	counter := newAcquireCounter()
	w.client.AddHook(counter)
	ctx := tctx(t, time.Minute)
	const key = "lostwake/resubscribe"
	h, err := holder.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	require.NoError(t, err)
	got := waitFor(tctx(t, 20*time.Second), t, w, admin, key)
	eventually(t, 10*time.Second, "the waiter subscribed and attempted again", func() bool { return counter.landed.Load() == 2 })
	if n := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Val(); n != 1 {
		t.Fatalf("killed %d pub/sub connections, want 1", n)
	}
	eventually(t, 10*time.Second, "the waiter, woken by the break, attempted again", func() bool { return counter.landed.Load() == 3 })
	if err := h.Release(ctx); err != nil { // go-redis resubscribes 50ms or more after the break
		t.Fatal(err)
	}
	require.NoError(t, <-got, "waiter not woken after the resubscription")
}

// TestWokenReentrantAcquirerMarksForOthers: two waiters A (owner "o") and
// B of one Locker wait behind X. X's release is followed, before A's
// woken attempt, by the acquisition of owner "o" in another process (no
// waiter there: the lock is not marked); the test writes that server state
// in one transaction with X's release and its publication. A's attempt
// then nests into that lock and A, holding, hands no wake-up on: B waits
// for the release of a lock nobody marked. When the other process's hold
// and then A's are released, B must be woken (its ctx ends after 20s; its
// retry delay and X's TTL are a minute).
func TestWokenReentrantAcquirerMarksForOthers(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, time.Minute)
	slow := distlock.WithRetry(distlock.Backoff{Min: time.Minute, Max: time.Minute})
	long := distlock.WithTTL(time.Minute)
	const key = "lostwake/reentrant"
	k := l.d.keys(key)
	x, err := holder.TryAcquire(ctx, key, long)
	require.NoError(t, err)
	wctx := tctx(t, 20*time.Second)
	leaseA := make(chan *distlock.Lease, 1)
	go func() {
		a, err := l.Acquire(wctx, key, slow, long, distlock.WithOwner("o"))
		assert.NoError(t, err)
		leaseA <- a
	}()
	eventually(t, 10*time.Second, "A waits", func() bool { return l.d.sub.Watching(k.Channel) })
	time.Sleep(100 * time.Millisecond) // A attempts again after subscribing
	gotB := waitFor(wctx, t, l, admin, key)

	// X released and published; owner "o" of another process took the
	// lock (unmarked) before A's woken attempt.
	_, err = admin.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Del(ctx, k.Lock)
		p.HSet(ctx, k.Lock, "o", "o", "t", x.Token()+1, "hother", time.Now().UnixMilli(), "name", k.Name)
		p.PExpire(ctx, k.Lock, time.Minute)
		p.Publish(ctx, k.Channel, x.Token())
		return nil
	})
	require.NoError(t, err)
	a := <-leaseA
	if a == nil {
		t.Fatal("A did not acquire")
	}
	if err := admin.HDel(ctx, k.Lock, "hother").Err(); err != nil { // the other process's release of its hold (no publication: A's hold remains)
		t.Fatal(err)
	}
	require.NoError(t, a.Release(ctx))
	require.NoError(t, <-gotB, "B not woken by the release of the lock A nested into")
}

// TestReleaseDuringResubscription: the waiter's pub/sub connection is
// killed (CLIENT KILL TYPE pubsub, as client-output-buffer-limit or an
// operator does), its first redial fails and the second is held; the
// break's wake-up finds the lock still held, and the holder releases while
// the resubscription is pending — publishing to no one. Once the
// resubscription is confirmed the waiter must attempt again and acquire,
// not sleep for the rest of the holder's minute-long TTL (its ctx ends
// after 20s).
func TestReleaseDuringResubscription(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	gate := redialgate.New()
	t.Cleanup(gate.Open)
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	waiter := newTestLocker(t, &goredis.Options{Addr: srv.Addr(), Dialer: gate.Dial})
	attempts := newScriptCounter()
	waiter.client.AddHook(attempts)
	admin := adminClient(t, srv.Addr())
	ctx := tctx(t, 2*time.Minute)
	const key = "lostwake/resubscribe"
	h, err := holder.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	require.NoError(t, err)
	got := startWaiter(tctx(t, 20*time.Second), t, waiter, key)
	eventually(t, 10*time.Second, "the waiter attempts, subscribes and attempts again", func() bool {
		return attempts.landed.Load() >= 2 && waiter.d.sub.Watching(waiter.d.keys(key).Channel)
	})

	gate.Arm()
	if n := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Val(); n != 1 {
		t.Fatalf("killed %d pub/sub clients, want 1", n)
	}
	select {
	case <-gate.Held(): // the first redial failed, the second waits
	case <-time.After(10 * time.Second):
		t.Fatal("no second redial")
	}
	eventually(t, 10*time.Second, "the break's wake-up: the waiter attempts again", func() bool { return attempts.landed.Load() >= 3 })
	require.NoError(t, h.Release(ctx))
	gate.Open()
	require.NoError(t, <-got, "waiter not woken after the resubscription: the release made while it was pending is lost")
}
