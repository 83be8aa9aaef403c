package redis

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFairOrderAcrossLockers: 12 waiters in 4 Lockers (4 clients, as 4
// processes would be), arriving one after another, acquire in arrival
// order; every handoff is a direct grant (the waiters' clients send no
// script between a release and the next holder's lease).
func TestFairOrderAcrossLockers(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	ctx := tctx(t, 2*time.Minute)
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()}, WithFair())
	require.True(t, holder.Capabilities().Fair, "WithFair: Capabilities().Fair is false")
	const lockers, n = 4, 12
	var (
		ls      [lockers]*testLocker
		counter [lockers]*cmdCounter
	)
	for i := range ls {
		ls[i] = newTestLocker(t, &goredis.Options{Addr: srv.Addr()}, WithFair())
		counter[i] = newScriptCounter()
		ls[i].client.AddHook(counter[i])
	}
	scripts := func() (s int64) {
		for _, c := range counter {
			s += c.n.Load()
		}
		return s
	}
	first, err := holder.TryAcquire(ctx, "fair/order", distlock.WithTTL(time.Minute))
	require.NoError(t, err)
	admin := adminClient(t, srv.Addr())
	k := redislua.KeysFor(redislua.DefaultPrefix, "fair/order").Fair()
	type got struct {
		i     int
		lease *distlock.Lease
	}
	out := make(chan got, n)
	for i := range n {
		go func() {
			lease, err := ls[i%lockers].Acquire(ctx, "fair/order", distlock.WithTTL(time.Minute))
			if err != nil {
				t.Error(err)
				lease = nil
			}
			out <- got{i, lease}
		}()
		eventually(t, 10*time.Second, "waiter queued", func() bool { return admin.ZCard(ctx, k.Queue).Val() == int64(i+1) })
	}
	eventually(t, 10*time.Second, "every waiter subscribed", func() bool {
		c := 0
		for _, l := range ls {
			_, ch := l.d.sub.Active()
			c += ch
		}
		return c == lockers
	})
	eventually(t, 10*time.Second, "every waiter's attempt after subscribing landed", func() bool {
		var landed int64
		for _, c := range counter {
			landed += c.landed.Load()
		}
		return landed >= 2*n
	})
	before := scripts()
	require.NoError(t, first.Release(ctx))
	prev := first.Token()
	for want := range n {
		var g got
		select {
		case g = <-out:
		case <-time.After(20 * time.Second):
			t.Fatalf("waiter %d not served", want)
		}
		if g.lease == nil {
			t.FailNow()
		}
		assert.Equal(t, want, g.i, "waiter %d acquired in turn %d: not in arrival order", g.i, want)
		if g.lease.Token() <= prev {
			t.Errorf("token %d after %d", g.lease.Token(), prev)
		}
		prev = g.lease.Token()
		if s := scripts(); s != before {
			t.Errorf("turn %d: the waiters' clients sent %d scripts between the release and the lease: not a direct grant", want, s-before)
		}
		require.NoError(t, g.lease.Release(ctx))
		before = scripts()
	}
	var grants int64
	for _, l := range ls {
		grants += l.d.sub.Stats().Grants
	}
	assert.Equal(t, int64(n), grants, "%d grants delivered, want %d", grants, n)
	if c := admin.ZCard(ctx, k.Queue).Val(); c != 0 {
		t.Errorf("queue has %d entries after every waiter was served", c)
	}
}

// TestFairGrantValidity: a granted lease's deadline is no later than the
// server's expiry of the lock, even when the grant comes long after the
// waiter's last attempt.
func TestFairGrantValidity(t *testing.T) {
	f := fairHeld(t, "fair/validity")
	ctx, admin, k, held := f.ctx, f.admin, f.k, f.held
	b := f.locker(t, nil)
	done := acquireAsync(t, ctx, b.Locker, "fair/validity", distlock.WithTTL(2*time.Second), distlock.WithAutoRefresh(false))
	eventually(t, 10*time.Second, "waiter queued", func() bool { return admin.ZCard(ctx, k.Queue).Val() == 1 })
	time.Sleep(700 * time.Millisecond) // the grant comes well after the last attempt
	require.NoError(t, held.Release(ctx))
	l := <-done
	if l == nil {
		t.FailNow()
	}
	pttl := admin.PTTL(ctx, k.Lock).Val()
	left := time.Until(l.Deadline())
	if left > pttl {
		t.Errorf("lease deadline in %v, server expiry in %v: the lease outlives the lock", left, pttl)
	}
	if left < time.Second {
		t.Errorf("lease deadline in %v of a 2s TTL granted just now: too pessimistic", left)
	}
	_ = l.Release(ctx)
}

// TestFairLeaveAndPoll: a waiter whose ctx ends leaves the queue at once
// (the next waiter is served by the release, not after a queue timeout), and
// a waiter without a subscription still gets its grant, by polling.
func TestFairLeaveAndPoll(t *testing.T) {
	f := fairHeld(t, "fair/leave")
	ctx, admin, k, held := f.ctx, f.admin, f.k, f.held
	quitter := f.locker(t, nil)
	// A subscribe timeout far below a round trip: no subscription, polling.
	poller := f.locker(t, nil, WithSubscribeTimeout(time.Nanosecond))
	qctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := quitter.Acquire(qctx, "fair/leave")
		if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled waiter: %v", err)
		}
	}()
	eventually(t, 10*time.Second, "quitter queued", func() bool { return admin.ZCard(ctx, k.Queue).Val() == 1 })
	got := acquireAsync(t, ctx, poller.Locker, "fair/leave")
	eventually(t, 10*time.Second, "poller queued", func() bool { return admin.ZCard(ctx, k.Queue).Val() == 2 })
	cancel()
	wg.Wait()
	eventually(t, 5*time.Second, "quitter left the queue", func() bool { return admin.ZCard(ctx, k.Queue).Val() == 1 })
	released := time.Now()
	require.NoError(t, held.Release(ctx))
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		if lag := time.Since(released); lag > queueRenew+500*time.Millisecond {
			t.Errorf("polling waiter served %v after the release", lag)
		}
		if s := poller.d.sub.Stats(); s.Grants != 0 {
			t.Errorf("the poller received its grant as a message (%+v): the test did not exercise polling", s)
		}
		_ = l.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("polling waiter not served")
	}
}

// TestFairCrashedWaiterSkipped: a waiter that vanished without leaving
// (its entry no longer renewed) is skipped once its entry is older than the
// queue TTL; the waiter behind it gets the lock.
func TestFairCrashedWaiterSkipped(t *testing.T) {
	f := fairHeld(t, "fair/crash")
	ctx, admin, k, held := f.ctx, f.admin, f.k, f.held
	b := f.locker(t, nil)
	// The crashed waiter: one attempt, never renewed.
	ghost := redislua.FairAttempt{Hold: redislua.NewHoldSource().Next(), N: 1, Enqueue: true, QueueTTL: queueTTL}
	if r, err := redislua.FairAcquire(ctx, admin, k, "ghost", time.Minute, ghost); err != nil || r.Outcome != redislua.Busy {
		t.Fatalf("ghost: %+v %v", r, err)
	}
	got := acquireAsync(t, ctx, b.Locker, "fair/crash")
	eventually(t, 10*time.Second, "waiter queued behind the ghost", func() bool { return admin.ZCard(ctx, k.Queue).Val() == 2 })
	time.Sleep(queueTTL + 100*time.Millisecond) // the scenario: the ghost's entry outlives its last renewal by queueTTL
	require.NoError(t, held.Release(ctx))
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		if o := admin.HGet(ctx, k.Lock, "o").Val(); o != l.Owner() {
			t.Errorf("lock owner %q, lease owner %q", o, l.Owner())
		}
		_ = l.Release(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter behind a dead entry was not served")
	}
}

// acquireAsync calls l.Acquire on a goroutine; the channel gets the lease,
// or nil after reporting the error.
func acquireAsync(t *testing.T, ctx context.Context, l *distlock.Locker, key string, opts ...distlock.Option) <-chan *distlock.Lease {
	got := make(chan *distlock.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctx, key, opts...)
		assert.NoError(t, err)
		got <- lease
	}()
	return got
}

// TestFairGrantMessageLost: the waiter's pub/sub connection is killed just
// before the release, so the grant message is lost; the waiter finds its
// grant with its next attempt (after the reconnection's wake-up or its
// renewal timer) and its lease is valid no longer than the server's lock.
func TestFairGrantMessageLost(t *testing.T) {
	f := fairHeld(t, "fair/lost")
	ctx, admin, k, held := f.ctx, f.admin, f.k, f.held
	b := f.locker(t, nil)
	got := acquireAsync(t, ctx, b.Locker, "fair/lost", distlock.WithTTL(10*time.Second))
	eventually(t, 10*time.Second, "waiter queued and subscribed", func() bool {
		_, c := b.d.sub.Active()
		return c == 1 && admin.ZCard(ctx, k.Queue).Val() == 1
	})
	require.NoError(t, admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
	released := time.Now()
	require.NoError(t, held.Release(ctx))
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		t.Logf("served %v after the release; grants by message: %d", time.Since(released), b.d.sub.Stats().Grants)
		if l.Token() <= held.Token() {
			t.Errorf("token %d after %d", l.Token(), held.Token())
		}
		if left, pttl := time.Until(l.Deadline()), admin.PTTL(ctx, k.Lock).Val(); left > pttl {
			t.Errorf("lease deadline in %v, server expiry in %v", left, pttl)
		}
		_ = l.Release(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not served 5s after a release whose grant message was lost")
	}
}

// afterFirstScript runs fn once, after the first script a client sent.
type afterFirstScript struct {
	n  atomic.Int64
	fn func()
}

func (h *afterFirstScript) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *afterFirstScript) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && h.n.Add(1) == 1 {
			h.fn()
		}
		return err
	}
}
func (h *afterFirstScript) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestFairCtxEndsWhileSubscribing: the waiter's ctx ends after its first
// attempt queued it and while its SUBSCRIBE waits (the server is paused):
// it leaves the queue anyway, so the release does not grant the lock to a
// waiter that is gone.
func TestFairCtxEndsWhileSubscribing(t *testing.T) {
	f := fairHeld(t, "fair/subscribing")
	ctx, admin := f.ctx, f.admin
	w := f.locker(t, nil)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.client.AddHook(&afterFirstScript{fn: func() {
		_ = admin.Do(context.Background(), "CLIENT", "PAUSE", 400, "ALL").Err()
		time.AfterFunc(100*time.Millisecond, cancel)
	}})
	start := time.Now()
	if _, err := w.Acquire(wctx, "fair/subscribing"); !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 300*time.Millisecond {
		t.Errorf("waiter returned %v after start, its ctx ended at 100ms", d)
	}
	f.releaseToNoOne(t)
}

// TestFairManyLeave: 200 waiters of one Locker give up at once; every one
// leaves the queue (none is dropped for lack of an undo slot), and the
// release finds no one to grant the lock to.
func TestFairManyLeave(t *testing.T) {
	f := fairHeld(t, "fair/many")
	ctx, admin, k := f.ctx, f.admin, f.k
	w := f.locker(t, &goredis.Options{PoolSize: 4})
	const n = 200
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = w.Acquire(wctx, "fair/many") }()
	}
	eventually(t, 20*time.Second, "every waiter queued", func() bool { return admin.ZCard(ctx, k.Queue).Val() == n })
	cancel()
	wg.Wait()
	f.releaseToNoOne(t)
}

// TestFairPollerShortTTL: a waiter without a subscription and with a TTL
// below the renewal interval polls often enough to use its grant before it
// expires: it keeps its turn ahead of a later, subscribed waiter.
func TestFairPollerShortTTL(t *testing.T) {
	f := fairHeld(t, "fair/poller")
	ctx, admin, k, held := f.ctx, f.admin, f.k, f.held
	poller := f.locker(t, nil, WithSubscribeTimeout(time.Nanosecond))
	b := f.locker(t, nil)
	// Below the renewal interval (queueRenew), which is what the test is
	// about; its margin against a loaded machine's stalls grows with
	// DISTLOCK_TEST_SLACK.
	pollerTTL := min(slack.D(300*time.Millisecond), queueRenew*9/10)
	type served struct {
		who   string
		lease *distlock.Lease
	}
	out := make(chan served, 2)
	for _, w := range []struct {
		who string
		l   *testLocker
		ttl time.Duration
	}{{"poller", poller, pollerTTL}, {"b", b, 2 * time.Second}} {
		before := admin.ZCard(ctx, k.Queue).Val()
		go func() {
			l, err := w.l.Acquire(ctx, "fair/poller", distlock.WithTTL(w.ttl))
			assert.NoError(t, err)
			out <- served{w.who, l}
		}()
		eventually(t, 10*time.Second, w.who+" queued", func() bool { return admin.ZCard(ctx, k.Queue).Val() == before+1 })
	}
	require.NoError(t, held.Release(ctx))
	for _, want := range []string{"poller", "b"} {
		s := <-out
		if s.lease == nil {
			t.FailNow()
		}
		assert.Equal(t, want, s.who, "%s served, want %s (arrival order)", s.who, want)
		_ = s.lease.Release(ctx)
	}
}

// fairFixture is what the fair tests share: a server, a fair Locker
// holding key for a minute, and key's names.
type fairFixture struct {
	addr  string
	ctx   context.Context
	admin *goredis.Client
	k     redislua.Keys
	held  *distlock.Lease
}

func fairHeld(t *testing.T, key string) *fairFixture {
	t.Helper()
	srv := testserver.Redis(t, testserver.RedisConfig{})
	f := &fairFixture{addr: srv.Addr(), ctx: tctx(t, time.Minute), admin: adminClient(t, srv.Addr()), k: redislua.KeysFor(redislua.DefaultPrefix, key).Fair()}
	var err error
	if f.held, err = f.locker(t, nil).TryAcquire(f.ctx, key, distlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	return f
}

// locker returns a fair Locker on the fixture's server (o: client options,
// or nil).
func (f *fairFixture) locker(t *testing.T, o *goredis.Options, opts ...Option) *testLocker {
	if o == nil {
		o = &goredis.Options{}
	}
	o.Addr = f.addr
	return newTestLocker(t, o, append([]Option{WithFair()}, opts...)...)
}

// releaseToNoOne waits for the queue to empty (every waiter left), releases
// the fixture's lease and checks that the lock was granted to no one.
func (f *fairFixture) releaseToNoOne(t *testing.T) {
	t.Helper()
	eventually(t, 5*time.Second, "every departed waiter out of the queue", func() bool { return f.admin.ZCard(f.ctx, f.k.Queue).Val() == 0 })
	require.NoError(t, f.held.Release(f.ctx))
	if o, err := f.admin.HGet(f.ctx, f.k.Lock, "o").Result(); !errors.Is(err, goredis.Nil) {
		t.Errorf("lock granted to a departed waiter: owner %q (%v)", o, err)
	}
}

// TestFairSameOwnerQueued: two Acquires of one owner (WithOwner) queue in
// two Lockers behind another holder. When the holder releases, the first
// is granted the lock and the second nests at once — a reentrant hold, as
// a TryAcquire of that owner would get — not at its next renewal about a
// second later.
func TestFairSameOwnerQueued(t *testing.T) {
	const key = "fair/owner"
	f := fairHeld(t, key)
	ctx, admin, k, held := f.ctx, f.admin, f.k, f.held
	a := f.locker(t, nil)
	b := f.locker(t, nil)
	bScripts := newScriptCounter()
	b.client.AddHook(bScripts)
	opts := []distlock.Option{distlock.WithOwner("same-owner"), distlock.WithTTL(10 * time.Second)}
	gotA := acquireAsync(t, ctx, a.Locker, key, opts...)
	eventually(t, 10*time.Second, "A's waiter queued", func() bool { return admin.ZCard(ctx, k.Queue).Val() == 1 })
	gotB := acquireAsync(t, ctx, b.Locker, key, opts...)
	eventually(t, 10*time.Second, "B's waiter queued, subscribed and attempted again", func() bool {
		_, c := b.d.sub.Active()
		return c == 1 && bScripts.landed.Load() >= 2 && admin.ZCard(ctx, k.Queue).Val() == 2
	}) // B's renewal is about 1s away
	released := time.Now()
	require.NoError(t, held.Release(ctx))
	var leases [2]*distlock.Lease
	for i, got := range []<-chan *distlock.Lease{gotA, gotB} {
		select {
		case leases[i] = <-got:
			if leases[i] == nil {
				t.FailNow()
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d not served 10s after the release", i)
		}
	}
	if took := time.Since(released); took > 300*time.Millisecond {
		t.Errorf("the owner's second queued waiter nested %v after the release, want at once (< 300ms)", took)
	}
	assert.Equal(t, leases[1].Token(), leases[0].Token(), "tokens %d and %d: a nested hold keeps the holder's token", leases[0].Token(), leases[1].Token())
	if h := admin.HGetAll(ctx, k.Lock).Val(); len(holds(h)) != 2 || h["o"] != "same-owner" {
		t.Errorf("lock in Redis = %v, want two holds of same-owner", h)
	}
	if c := admin.ZCard(ctx, k.Queue).Val(); c != 0 {
		t.Errorf("queue has %d entries after both waiters were served", c)
	}
	for _, l := range leases {
		require.NoError(t, l.Release(ctx))
	}
	assert.Equal(t, int64(0), admin.Exists(ctx, k.Lock).Val(), "lock left after both holds were released")
}
