package redissub

import (
	"context"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fired reports whether ch fires within d (0: whether it has fired).
func fired(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	default:
		if d == 0 {
			return false
		}
	}
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// dispatched waits until sub has received n messages and dispatched the
// last one: dispatch counts a message and wakes its waiters under the
// Subscriber's lock, which Active takes.
func dispatched(t *testing.T, sub *Subscriber, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for sub.Stats().Messages < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d messages received, want %d", sub.Stats().Messages, n)
		}
		time.Sleep(time.Millisecond)
	}
	sub.Active()
}

// TestSubscriberWakesHeadAndHandsOn: a release message wakes only the
// waiter of lowest rank; a woken waiter that leaves hands the wake-up on to
// the next one, a waiter that was never woken hands nothing on, and a head
// whose retry lost is woken again by the next release.
func TestSubscriberWakesHeadAndHandsOn(t *testing.T) {
	const channel = "wake-one"
	sub, publishMsg := pubRig(t, channel)
	publish := func() { t.Helper(); publishMsg("0") }
	const n = 4
	chs := make([]<-chan struct{}, n)
	cancels := make([]func(), n)
	for i := range n {
		chs[i], cancels[i] = sub.Watch(t.Context(), channel)
		defer cancels[i]()
	}
	quiet := func(why string, except ...int) {
		t.Helper()
		for i, ch := range chs {
			skip := false
			for _, e := range except {
				skip = skip || e == i
			}
			if !skip && fired(ch, 0) {
				t.Errorf("%s: watcher %d woken", why, i)
			}
		}
	}

	publish()
	if !fired(chs[0], 5*time.Second) {
		t.Fatal("head not woken by a release")
	}
	dispatched(t, sub, 1)
	quiet("one release")

	// The head retried and lost: the next release wakes it again.
	publish()
	if !fired(chs[0], 5*time.Second) {
		t.Fatal("head not woken by the second release")
	}
	dispatched(t, sub, 2)
	quiet("second release")

	// Watcher 2 leaves without having been woken: nothing is handed on.
	cancels[2]() // a hand-on happens within cancel, under the Subscriber's lock
	quiet("an unwoken waiter left")

	// The woken head leaves: watcher 1 gets the wake-up.
	cancels[0]()
	if !fired(chs[1], 5*time.Second) {
		t.Fatal("a woken waiter left without handing the wake-up on")
	}
	quiet("hand-on", 1)
	// Watcher 1 leaves too (say it acquired): watcher 3 is next.
	cancels[1]()
	if !fired(chs[3], 5*time.Second) {
		t.Fatal("hand-on not passed along the queue")
	}
	st := sub.Stats()
	assert.Equal(t, int64(2), st.HandOns, "Stats.HandOns")
	assert.Equal(t, int64(2), st.Messages, "Stats.Messages")
}

// TestSubscriberRanks: WatchRank queues waiters by the caller's rank, not by
// arrival, so several Subscribers given the same ranks agree on the head; a
// channel shared by several Subscribers receives from each.
func TestSubscriberRanks(t *testing.T) {
	c1, c2 := client(t), client(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	subs := []*Subscriber{NewSubscriber(c1, SubscriberOptions{}), NewSubscriber(c2, SubscriberOptions{})}
	for _, s := range subs {
		defer s.Close()
	}
	const channel = "ranked"
	early, late := NextRank(), NextRank()
	a, b := make(chan struct{}, 1), make(chan struct{}, 1)
	for _, s := range subs {
		// The later rank registers first.
		if ok, cancel := s.WatchRank(t.Context(), channel, b, late); !ok {
			t.Fatal("not confirmed")
		} else {
			defer cancel()
		}
		if ok, cancel := s.WatchRank(t.Context(), channel, a, early); !ok {
			t.Fatal("not confirmed")
		} else {
			defer cancel()
		}
	}
	// A release published through each Subscriber's server in turn.
	for i, c := range []*goredis.Client{c2, c1} {
		require.NoError(t, c.Publish(ctx, channel, "0").Err())
		if !fired(a, 5*time.Second) {
			t.Fatalf("release %d: lowest rank not woken", i)
		}
		dispatched(t, subs[1-i], 1)
		assert.False(t, fired(b, 0), "release %d: a higher rank was woken too", i)
	}
}

// TestSubscriberWaiterLeavesBeforeSubscribe: a waiter whose ctx has ended
// leaves before its channel's SUBSCRIBE is written; a waiter that arrives
// right after it still gets a confirmed subscription, whichever of the
// subscribe and the unsubscribe runs first.
func TestSubscriberWaiterLeavesBeforeSubscribe(t *testing.T) {
	c := client(t)
	sub := NewSubscriber(c, SubscriberOptions{ConfirmTimeout: 5 * time.Second})
	defer sub.Close()
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	for i := range 200 {
		channel := "leave-" + strconv.Itoa(i)
		if _, stop := sub.Watch(gone, channel); stop != nil {
			stop()
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		ch, stop := sub.Watch(ctx, channel)
		cancel()
		stop()
		if ch == never {
			t.Fatalf("channel %d: the waiter after one that left got no subscription", i)
		}
	}
}

func TestSubscriberUnavailable(t *testing.T) {
	// No server: Watch gives up after its confirm timeout with a channel
	// that never fires, and Close stops everything.
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", DialerRetries: 1})
	defer c.Close()
	sub := NewSubscriber(c, SubscriberOptions{ConfirmTimeout: 300 * time.Millisecond})
	start := time.Now()
	ch, cancel := sub.Watch(t.Context(), "chan")
	cancel()
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Watch took %v with a 300ms confirm timeout", took)
	}
	if ch == nil {
		t.Fatal("nil channel")
	}
	if ch != never {
		t.Error("Watch without a subscription returned a channel that may fire")
	}
	done := make(chan struct{})
	go func() { _ = sub.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung")
	}
	if ch, _ := sub.Watch(t.Context(), "chan"); ch == nil {
		t.Error("Watch after Close returned nil")
	}
}

// TestWatchHeldHandsNothingOn: a woken waiter that leaves holding the lock
// (WatchHeld's cancel(true)) hands no wake-up on — the lock is taken, and
// its release wakes the next waiter; one that leaves without it
// (cancel(false)) hands the wake-up on as Watch's cancel does.
func TestWatchHeldHandsNothingOn(t *testing.T) {
	const channel = "held"
	sub, publishMsg := pubRig(t, channel)
	publish := func() { t.Helper(); publishMsg("0") }
	chs := make([]<-chan struct{}, 3)
	cancels := make([]func(bool), 3)
	for i := range chs {
		chs[i], cancels[i] = sub.WatchHeld(t.Context(), channel)
		defer cancels[i](false)
	}
	publish()
	if !fired(chs[0], 5*time.Second) {
		t.Fatal("head not woken by a release")
	}
	dispatched(t, sub, 1)
	cancels[0](true) // acquired
	if fired(chs[1], 0) || fired(chs[2], 0) {
		t.Fatal("a woken waiter that left holding the lock handed the wake-up on")
	}
	if n := sub.Stats().HandOns; n != 0 {
		t.Fatalf("%d hand-ons, want 0", n)
	}
	publish() // its release wakes the next head
	if !fired(chs[1], 5*time.Second) {
		t.Fatal("the next head not woken by the release")
	}
	dispatched(t, sub, 2)
	cancels[1](false) // gave up: hands on
	if !fired(chs[2], 5*time.Second) {
		t.Fatal("a woken waiter that left without the lock did not hand the wake-up on")
	}
}

// TestWatchAllObserverTakesNoWakeUp: an observer (WatchAll) that arrived
// first is woken by every release message but is never the head: the
// waiter behind it is woken too, although the observer does not read its
// channel; the observer's leaving hands nothing on.
func TestWatchAllObserverTakesNoWakeUp(t *testing.T) {
	const channel = "observer-first"
	sub, publish := pubRig(t, channel)
	ctx := t.Context()
	obs, unobserve := sub.WatchAll(ctx, channel)
	w1, cancel1 := sub.Watch(ctx, channel)
	defer cancel1()
	w2, cancel2 := sub.Watch(ctx, channel)
	defer cancel2()
	publish("1")
	dispatched(t, sub, 1)
	require.True(t, fired(w1, 0), "the waiter behind the observer was not woken")
	require.True(t, fired(obs, 0), "the observer was not woken")
	require.False(t, fired(w2, 0), "the second waiter was woken too (only the head is)")
	publish("2")
	dispatched(t, sub, 2)
	unobserve() // woken, not reading: hands nothing on
	sub.Active()
	require.False(t, fired(w2, 0), "the observer's leaving handed a wake-up on")
	require.True(t, fired(w1, 0), "the head was not woken by the second message")
}

// pubRig is a Subscriber on a test server and a function that publishes a
// message on channel there.
func pubRig(t *testing.T, channel string) (*Subscriber, func(msg string)) {
	t.Helper()
	c := client(t)
	sub := NewSubscriber(c, SubscriberOptions{})
	t.Cleanup(func() { _ = sub.Close() })
	return sub, func(msg string) {
		t.Helper()
		if err := c.Publish(t.Context(), channel, msg).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
