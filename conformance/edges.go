package conformance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// The checks at the edges of a lease: its last milliseconds, a refresh
// racing its release, and a refresh the backend refuses.
func edgeChecks() []Check {
	return []Check{
		{"expiry-not-early", "a lock is never granted to another owner before the holder's TTL has passed since the holder's request was sent, not even in its last milliseconds", false, checkExpiryNotEarly},
		{"refresh-release-race", "a Refresh racing the same lease's Release and another owner's Acquire never keeps or brings back the released lock: the other owner acquires, and after its Release the lock is free", false, checkRefreshReleaseRace},
		{"refresh-refused", "an automatic refresh that the backend refuses (the lock is gone) ends the lease at once, not at its local deadline", false, checkRefreshRefused},
	}
}

// checkExpiryNotEarly checks that the holder counts its validity from the
// send, then polls for the lock from half its TTL on, as fast as
// round trips allow: a grant whose reply arrives before sent+ttl was made
// by the backend while the holder's TTL, counted from no earlier than sent,
// still ran — an early expiry of even a few milliseconds.
//
// Where the harness can delay one client's link, the holder's request and
// reply each take expiryLag: a deadline counted from the reply (or from the
// backend's grant) is then at least that lag past sent+ttl, while one
// counted from the send is past it only by the moments between the check's
// clock reading and the client's (goroutine scheduling on a loaded
// machine), which half the lag bounds. Without a link, the bound is
// sent+ttl plus unlinkedTolerance for those moments: a deadline counted
// from a reply that took longer than that shows.
func checkExpiryNotEarly(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	needs(t, a.Capabilities().Expiring, "Expiring")
	key, ttl := h.key(t, "edge"), h.ttl()
	// lag: the holder's request reaches the backend no sooner than
	// sent+lag, so its TTL there cannot end before sent+lag+ttl.
	var lag time.Duration
	tolerance := slack.D(unlinkedTolerance)
	var link Link
	if h.Faults.NewLinkedLocker != nil {
		a, link = needLink(t, h)
		// Connections open and scripts loaded, to the server of key (a
		// Cluster's master of its slot): the lag then costs the
		// acquisition its round trips, not a dial's.
		mustRelease(t, mustTry(t, a, key))
		lag = expiryLag(ttl)
		link.SetLatency(lag)
		tolerance = lag / 2
	}
	sent := time.Now()
	holder := mustTry(t, a, key, distlock.WithTTL(ttl), distlock.WithAutoRefresh(false))
	defer func() { _ = holder.Release(context.Background()) }()
	if link != nil {
		link.Heal()
	}
	if dl := holder.Deadline(); !dl.IsZero() && dl.After(sent.Add(ttl+tolerance)) {
		t.Errorf("the lease's validity deadline is %v past the moment its request was sent + TTL (tolerance %v): validity must be counted from the send, not from the reply", dl.Sub(sent.Add(ttl)), tolerance)
	}
	time.Sleep(ttl / 2)
	ctx := ctxFor(t, ttl+slack.D(30*time.Second))
	tries := 0
	for {
		tries++
		other, err := b.TryAcquire(ctx, key)
		at := time.Now()
		if err == nil {
			if early := sent.Add(lag + ttl).Sub(at); early > 0 {
				t.Errorf("another owner was granted the lock %v before the holder's %v TTL could have run out (its request delayed %v; try %d): two owners held it", early, ttl, lag, tries)
			}
			mustRelease(t, other)
			return
		}
		if !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire while polling for the expiry: %v", err)
		}
	}
}

// unlinkedTolerance is what checkExpiryNotEarly allows, without a link to
// delay, between its clock reading and the client's (scaled by the slack
// knob): a loaded machine's scheduling delay, 1.4 ms in a `distlock demo`
// run beside the test suite.
const unlinkedTolerance = 10 * time.Millisecond

// expiryLag is the one-way delay checkExpiryNotEarly puts on the holder's
// link, for a harness TTL of ttl: an eighth of it (50 ms for the default
// 400 ms), so that an acquisition of a few round trips still ends well
// within the TTL, and at most 100 ms; half of it stays above a loaded
// machine's scheduling delays.
func expiryLag(ttl time.Duration) time.Duration { return min(ttl/8, 100*time.Millisecond) }

// checkRefreshReleaseRace races, round after round, the holder's Refresh
// (to a TTL far longer than the check) against its own Release and another
// owner's waiting Acquire. A refresh applied after the release would keep
// the lock for a minute: the other owner could not acquire, or the lock
// would stay taken after the other owner's Release.
func checkRefreshReleaseRace(t T, h *Harness) {
	a, b, c := h.locker(t), h.locker(t), h.locker(t)
	needs(t, a.Capabilities().Expiring, "Expiring")
	const rounds = 20
	for round := range rounds {
		key := h.key(t, "race")
		lease := mustTry(t, a, key, distlock.WithAutoRefresh(false))
		waiter := make(chan error, 1)
		var other *distlock.Lease
		go func() {
			var err error
			other, err = b.Acquire(ctxFor(t, slack.D(20*time.Second)), key)
			waiter <- err
		}()
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			// Until the Release wins (bounded: a Release that never
			// returns fails the check above).
			for range 1000 {
				if lease.Refresh(ctxFor(t, 10*time.Second), time.Minute) != nil {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			if err := lease.Release(ctxFor(t, 10*time.Second)); err != nil {
				t.Errorf("round %d: Release racing a Refresh: %v", round, err)
			}
		}()
		wg.Wait()
		if err := <-waiter; err != nil {
			t.Fatalf("round %d: the other owner could not acquire after the holder's Release (a racing Refresh kept the lock?): %v", round, err)
		}
		mustRelease(t, other)
		expectFree(t, c, key, slack.D(2*time.Second), "after the other owner's Release (a racing Refresh must not bring the first holder's lock back)")
	}
}

// checkRefreshRefused drops the lock in the backend under a holder whose
// automatic refresh runs every few seconds: the first refresh after the
// drop is refused, and that must end the lease then, not at its local
// deadline a TTL after the last good refresh.
func checkRefreshRefused(t T, h *Harness) {
	if h.Faults.Expire == nil {
		t.Skipf("the harness cannot drop a lock in the backend (Faults.Expire)")
	}
	a := h.locker(t)
	needs(t, a.Capabilities().Expiring, "Expiring")
	const ttl = 6 * time.Second // refreshed about every 2s; the local deadline is 6s after the last refresh
	key := h.key(t, "refused")
	lease := mustTry(t, a, key, distlock.WithTTL(ttl))
	defer func() { _ = lease.Release(context.Background()) }()
	if err := h.Faults.Expire(ctxFor(t, 10*time.Second), key); err != nil {
		t.Fatalf("Expire: %v", err)
	}
	dropped := time.Now()
	bound := ttl/3 + slack.D(time.Second)
	select {
	case <-lease.Done():
	case <-time.After(ttl + slack.D(5*time.Second)):
		t.Fatalf("lease still live %v after its lock was dropped (auto-refresh every ~%v)", time.Since(dropped).Round(time.Millisecond), ttl/3)
	}
	took := time.Since(dropped)
	if took > bound {
		t.Errorf("lease ended %v after its lock was dropped, want within one refresh interval (%v) + slack: a refused refresh must end it at once", took.Round(time.Millisecond), bound)
	}
	if err := lease.Err(); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("lease ended with %v, want ErrLockLost", err)
	}
}
