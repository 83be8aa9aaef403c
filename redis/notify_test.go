package redis

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNotifySharedSubscription: waiters are woken by the release's pub/sub
// message, not by polling, and all waiters of one Locker share ONE pub/sub
// connection, whether they wait for one key or for many.
func TestNotifySharedSubscription(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	w := newTestLocker(t, &goredis.Options{Addr: srv.Addr(), ClientName: "waiters"})
	counter := newAcquireCounter()
	w.client.AddHook(counter)
	ctx := tctx(t, 2*time.Minute)
	slow := distlock.WithRetry(distlock.Backoff{Min: time.Minute, Max: time.Minute})
	const n = 8

	for _, shape := range []string{"one key", "distinct keys"} {
		t.Run(shape, func(t *testing.T) {
			keyOf := func(i int) string {
				if shape == "one key" {
					return "notify/one"
				}
				return fmt.Sprintf("notify/%d", i)
			}
			var held []*distlock.Lease
			for i := range n {
				if i > 0 && shape == "one key" {
					break
				}
				l, err := holder.TryAcquire(ctx, keyOf(i), distlock.WithTTL(time.Minute))
				require.NoError(t, err)
				held = append(held, l)
			}
			before := counter.n.Load()
			type res struct {
				lease *distlock.Lease
				at    time.Time
				err   error
			}
			results := make(chan res, n)
			for i := range n {
				go func() {
					lease, err := w.Acquire(ctx, keyOf(i), slow)
					results <- res{lease, time.Now(), err}
				}()
			}
			channels := n
			if shape == "one key" {
				channels = 1
			}
			eventually(t, 10*time.Second, "waiters subscribed", func() bool {
				_, c := w.d.sub.Active()
				return c == channels && counter.n.Load()-before == 2*n // first try + retry after subscribing
			})
			ps := pubsubClients(t, admin)
			if len(ps) != 1 || !strings.Contains(ps[0], "name=waiters") || !strings.Contains(ps[0], "sub="+strconv.Itoa(channels)) {
				t.Errorf("%d waiters: pub/sub connections %q, want ONE (the waiters' Locker) with %d channels", n, ps, channels)
			}
			numsub := admin.PubSubNumSub(ctx, redislua.KeysFor(redislua.DefaultPrefix, keyOf(0)).Channel).Val()
			for _, c := range numsub {
				assert.Equal(t, int64(1), c, "PUBSUB NUMSUB = %v, want 1 subscriber", numsub)
			}
			time.Sleep(100 * time.Millisecond)
			if got := counter.n.Load() - before; got != 2*n {
				t.Errorf("%d acquire attempts while nothing was released: waiters poll", got)
			}
			// Release: every waiter acquires promptly, woken by messages.
			for _, l := range held {
				released := time.Now()
				require.NoError(t, l.Release(ctx))
				if shape == "distinct keys" {
					r := <-results
					require.NoError(t, r.err)
					if lag := r.at.Sub(released); lag > 2*time.Second {
						t.Errorf("waiter woke %v after the release", lag)
					}
					_ = r.lease.Release(ctx)
				}
			}
			if shape == "one key" {
				for range n {
					select {
					case r := <-results:
						require.NoError(t, r.err)
						require.NoError(t, r.lease.Release(ctx))
					case <-time.After(10 * time.Second):
						t.Fatal("waiters on one key not all served within 10s of the releases: notifications lost")
					}
				}
			}
			attempts := counter.n.Load() - before
			t.Logf("%s: %d waiters, %d acquire attempts in all", shape, n, attempts)
			if shape == "distinct keys" && attempts != 3*n {
				t.Errorf("%d acquire attempts, want %d (try, retry after subscribing, and one after the wake-up)", attempts, 3*n)
			}
		})
	}
}

// TestSubscriptionLifecycle: the shared subscription's goroutine and
// connection exist only while someone waits, and nothing is left after
// Close.
func TestSubscriptionLifecycle(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	ctx := tctx(t, time.Minute)
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	base := runtime.NumGoroutine()

	w := newTestLocker(t, &goredis.Options{Addr: srv.Addr()}, WithSubscriptionLinger(0))
	wait := func(key string) (chan error, *distlock.Lease) {
		held, err := holder.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			lease, err := w.Acquire(ctx, key)
			if err == nil {
				err = lease.Release(ctx)
			}
			done <- err
		}()
		eventually(t, 10*time.Second, "waiter subscribed", func() bool { _, c := w.d.sub.Active(); return c == 1 })
		return done, held
	}
	done, held := wait("life/1")
	// The waiter is registered before its SUBSCRIBE reaches the server:
	// the server's client list follows within a round trip or so.
	eventually(t, slack.D(5*time.Second), "one subscription on the server while a waiter waits", func() bool {
		active, _ := w.d.sub.Active()
		return active && len(pubsubClients(t, admin)) == 1
	})
	require.NoError(t, held.Release(ctx))
	require.NoError(t, <-done)
	eventually(t, 5*time.Second, "subscription closed after the last waiter left", func() bool {
		active, _ := w.d.sub.Active()
		return !active && len(pubsubClients(t, admin)) == 0
	})

	// Close while a waiter waits: the waiter ends with ErrClosed, the
	// reader goroutine and every connection are gone.
	done, held = wait("life/2")
	require.NoError(t, w.Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, distlock.ErrClosed, "waiter after Close")
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not ended 5s after Close")
	}
	_ = held.Release(ctx)
	eventually(t, 5*time.Second, "pub/sub connection closed", func() bool { return len(pubsubClients(t, admin)) == 0 })
	// Close returns when the reader's deferred wg.Done has run, a moment
	// before its goroutine is gone from the stack dump: poll both.
	eventually(t, 5*time.Second, "goroutines back to the baseline and no subscriber reader after Close", func() bool {
		return runtime.NumGoroutine() <= base && !goroutineRunning("redissub.(*Subscriber).read")
	})
}

// TestLingerStopsGoroutine: with the default linger the goroutine stops
// shortly after the last waiter left.
func TestLingerStopsGoroutine(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	ctx := tctx(t, time.Minute)
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	w := newTestLocker(t, &goredis.Options{Addr: srv.Addr()}, WithSubscriptionLinger(300*time.Millisecond))
	held, err := holder.TryAcquire(ctx, "linger", distlock.WithTTL(time.Minute))
	require.NoError(t, err)
	ch, cancel := w.d.Watch(t.Context(), backend.Request{Key: "linger"})
	if ch == nil {
		t.Fatal("nil channel")
	}
	if active, c := w.d.sub.Active(); !active || c != 1 {
		t.Fatalf("Watch returned before subscribing: active=%v channels=%d", active, c)
	}
	require.NoError(t, held.Release(ctx))
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up after the release")
	}
	cancel()
	cancel() // idempotent
	// The unsubscribe runs in the background; the session lingers.
	eventually(t, 250*time.Millisecond, "unsubscribed and lingering (session up, 0 channels)", func() bool {
		active, c := w.d.sub.Active()
		return active && c == 0
	})
	// The session is detached first; its reader exits once the
	// connection is closed.
	eventually(t, 5*time.Second, "lingering subscription and its reader goroutine ended", func() bool {
		active, _ := w.d.sub.Active()
		return !active && !goroutineRunning("redissub.(*Subscriber).read")
	})
}

// TestSubscriptionSurvivesReconnect: when the shared pub/sub connection is
// killed, waiters are woken (messages may have been lost) and the
// subscription is re-established, so later releases still wake waiters.
func TestSubscriptionSurvivesReconnect(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	ctx := tctx(t, time.Minute)
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	w := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	held, err := holder.TryAcquire(ctx, "reconnect", distlock.WithTTL(time.Minute))
	require.NoError(t, err)
	ch, cancel := w.d.Watch(t.Context(), backend.Request{Key: "reconnect"})
	defer cancel()
	if n := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Val(); n != 1 {
		t.Fatalf("killed %d pub/sub clients, want 1", n)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("watcher not woken after its connection was killed")
	}
	eventually(t, 10*time.Second, "resubscribed", func() bool { return len(pubsubClients(t, admin)) == 1 })
	// A second watcher of the same key waits for the resubscription.
	ch2, cancel2 := w.d.Watch(t.Context(), backend.Request{Key: "reconnect"})
	defer cancel2()
	require.NoError(t, held.Release(ctx))
	// The release wakes the head of the queue (the first watcher); when it
	// leaves, it hands the wake-up on to the second.
	for i, c := range []<-chan struct{}{ch, ch2} {
		select {
		case <-c:
		case <-time.After(5 * time.Second):
			t.Fatalf("watcher %d not woken by a release after the reconnect", i)
		}
		if i == 0 {
			cancel()
		}
	}
}

// TestWokenAcquirerHandsNothingOn: of two waiters of one Locker, the one
// woken by a release acquires, and leaves its wake-up unhanded — the lock
// is taken: the other waiter makes no attempt until the next release (its
// attempt would have been refused; before backend.HeldNotifier every
// handoff cost one). The lock it took is marked for the other waiter
// (AcquireWaited), whose wake-up then comes from its release, long before
// the minute-long TTL and retry delay (its ctx ends after 20s).
func TestWokenAcquirerHandsNothingOn(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	w := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	counter := newAcquireCounter()
	w.client.AddHook(counter)
	ctx := tctx(t, time.Minute)
	slow := distlock.WithRetry(distlock.Backoff{Min: time.Minute, Max: time.Minute})
	const key = "notify/handon"
	h, err := holder.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	require.NoError(t, err)
	leases := make(chan *distlock.Lease, 2)
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	for i := range 2 {
		go func() {
			lease, err := w.Acquire(wctx, key, slow, distlock.WithTTL(time.Minute))
			assert.NoError(t, err)
			leases <- lease
		}()
		// in order: first try, then the retry after subscribing
		eventually(t, 10*time.Second, "waiter subscribed and retried", func() bool { return counter.n.Load() == int64(2*(i+1)) })
	}
	require.NoError(t, h.Release(ctx))
	first := <-leases
	// The winner's attempt: 5 in all. A hand-on would make the other
	// waiter attempt within milliseconds; wait well past that.
	time.Sleep(300 * time.Millisecond)
	if n := counter.n.Load(); n != 5 {
		t.Fatalf("%d acquire attempts after the handoff, want 5 (2 per waiter, the winner's 1): the woken winner handed its wake-up on", n)
	}
	require.NoError(t, first.Release(ctx))
	second := <-leases
	if second == nil {
		t.Fatal("the second waiter did not acquire after the release")
	}
	_ = second.Release(ctx)
}
