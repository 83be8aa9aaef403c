package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// The checks over a DirectedLink: an acquisition whose request, not only
// its reply, is still in the network when its ctx ends; and calls on a
// client one of whose connections has gone silent.

const (
	// requestDelay holds the request of the acquisition under test, far
	// longer than its ctx (inFlightCtx): the request lands after the call
	// has returned and after its cleanup has started.
	requestDelay = 600 * time.Millisecond
	inFlightCtx  = 200 * time.Millisecond
	// cleanupBound is how long the background cleanup of an acquisition
	// with an unknown outcome may take to give its lock back: seconds,
	// against the 10-minute TTL an orphan would otherwise keep.
	cleanupBound = 5 * time.Second
	// orphanTTL is the TTL of the acquisitions under test.
	orphanTTL = 10 * time.Minute
	// silentCtx is the ctx of each call with a silent connection, and
	// callSlack how much longer than its ctx the call may take.
	silentCtx = 150 * time.Millisecond
	callSlack = 750 * time.Millisecond
	// maxSilenced bounds the connections silenced in turn.
	maxSilenced = 16
)

// needDirectedLink returns a linked Locker whose Link is a DirectedLink,
// or skips the check.
func needDirectedLink(t T, h *Harness) (*distlock.Locker, DirectedLink) {
	t.Helper()
	l, link := needLink(t, h)
	dl, ok := link.(DirectedLink)
	if !ok {
		t.Skipf("the harness's Link cannot delay one direction or silence one connection (conformance.DirectedLink)")
	}
	return l, dl
}

// lostRequest runs acquire with a ctx of inFlightCtx while the client's
// requests are held for requestDelay, and waits until the held request has
// landed. The link heals shortly before the ctx ends: the held request
// keeps its delay, and whatever the client sends after the timeout — the
// cleanup of the ambiguous attempt — passes at once, so it can reach the
// backend before the request it cleans up after. The call must fail with
// its ctx error, promptly. If the request left only after the heal (a
// stalled machine) and was granted, the attempt is repeated.
func lostRequest(t T, link DirectedLink, what string, acquire func(ctx context.Context) (*distlock.Lease, error)) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		link.DelayRequests(requestDelay)
		heal := time.AfterFunc(inFlightCtx*3/4, link.Heal)
		ctx, cancel := context.WithTimeout(t.Context(), inFlightCtx)
		start := time.Now()
		lease, err := acquire(ctx)
		took := time.Since(start)
		cancel()
		heal.Stop()
		link.Heal()
		if err == nil {
			mustRelease(t, lease)
			if attempt < 3 {
				continue
			}
			t.Fatalf("%s succeeded %d times although its request was held %v past its %v ctx", what, attempt, requestDelay, inFlightCtx)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s with its request in flight: %v, want the ctx error", what, err)
		}
		if took > inFlightCtx+slack.D(callSlack) {
			t.Errorf("%s with its request in flight returned after %v, want within its %v ctx + %v", what, took, inFlightCtx, slack.D(callSlack))
		}
		time.Sleep(time.Until(start.Add(requestDelay + 100*time.Millisecond)))
		return
	}
}

// expectFreeSoon polls with TryAcquire until another owner gets key, for at
// most cleanupBound, then releases it. It reports how long it took.
func expectFreeSoon(t T, l *distlock.Locker, key, why string) time.Duration {
	t.Helper()
	return expectTakenSoon(t, func(ctx context.Context) (*distlock.Lease, error) { return l.TryAcquire(ctx, key) }, key, why)
}

// expectTakenSoon is expectFreeSoon for what try takes (a lock, a permit)
// under the name key.
func expectTakenSoon(t T, try func(ctx context.Context) (*distlock.Lease, error), key, why string) time.Duration {
	t.Helper()
	start := time.Now()
	var err error
	for {
		var lease *distlock.Lease
		lease, err = try(ctxFor(t, 10*time.Second))
		if err == nil {
			mustRelease(t, lease)
			return time.Since(start)
		}
		if time.Since(start) > cleanupBound {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: another owner cannot acquire %q %v later (the lock's TTL is %v): %v", why, key, cleanupBound, orphanTTL, err)
	return 0
}

// expectNothingHeld waits, if the harness can look, until the backend holds
// no lock of the suite, for at most cleanupBound.
func expectNothingHeld(t T, h *Harness, why string) {
	t.Helper()
	if h.Faults.Held == nil {
		return
	}
	deadline := time.Now().Add(cleanupBound)
	for {
		held, err := h.Faults.Held(ctxFor(t, 10*time.Second))
		if err != nil {
			t.Fatalf("Held: %v", err)
		}
		if len(held) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: left behind in the backend %v later: %v", why, cleanupBound, held)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func checkRequestInFlight(t T, h *Harness) {
	b := h.locker(t)
	l, link := needDirectedLink(t, h)
	key := h.key(t, "reqflight")
	mustRelease(t, mustTry(t, l, key)) // connections open, schema ready
	lostRequest(t, link, "TryAcquire", func(ctx context.Context) (*distlock.Lease, error) {
		return l.TryAcquire(ctx, key, distlock.WithTTL(orphanTTL))
	})
	took := expectFreeSoon(t, b, key, "after a TryAcquire whose request landed after its ctx ended")
	t.Logf("free %v after the held request landed", took.Round(time.Millisecond))
	expectNothingHeld(t, h, "after a TryAcquire whose request landed after its ctx ended")
}

// checkRequestInFlightClose is checkRequestInFlight with the Locker closed
// right after the call returned (a service shutting down after a
// timeout): Close must not cut short the cleanup of a request that may
// still land, while the backend answers.
func checkRequestInFlightClose(t T, h *Harness) {
	b := h.locker(t)
	l, link := needDirectedLink(t, h)
	key := h.key(t, "reqflight-close")
	mustRelease(t, mustTry(t, l, key)) // connections open, schema ready
	link.DelayRequests(requestDelay)
	heal := time.AfterFunc(inFlightCtx*3/4, link.Heal)
	ctx, cancel := context.WithTimeout(t.Context(), inFlightCtx)
	lease, err := l.TryAcquire(ctx, key, distlock.WithTTL(orphanTTL))
	cancel()
	if err == nil {
		heal.Stop()
		link.Heal()
		mustRelease(t, lease)
		t.Skipf("TryAcquire succeeded although its request was held %v past its %v ctx (a stalled machine)", requestDelay, inFlightCtx)
	}
	start := time.Now()
	_ = l.Close()
	closeTook := time.Since(start)
	heal.Stop()
	link.Heal()
	if closeTook > slack.D(15*time.Second) {
		t.Errorf("Close right after a TryAcquire with its request in flight took %v", closeTook)
	}
	time.Sleep(time.Until(start.Add(requestDelay + 100*time.Millisecond)))
	took := expectFreeSoon(t, b, key, "after a TryAcquire whose request was in flight and Close of its Locker")
	t.Logf("Close took %v; free %v after the held request landed", closeTook.Round(time.Millisecond), took.Round(time.Millisecond))
	expectNothingHeld(t, h, "after a TryAcquire whose request was in flight and Close of its Locker")
}

func checkRequestInFlightOwner(t T, h *Harness) {
	b := h.locker(t)
	needs(t, b.Capabilities().Reentrant, "Reentrant")
	l, link := needDirectedLink(t, h)
	key := h.key(t, "reqflight-owner")
	owner := distlock.WithOwner(fmt.Sprintf("retry-%d", keySeq.Add(1)))
	mustRelease(t, mustTry(t, l, key, owner))
	lostRequest(t, link, "Acquire", func(ctx context.Context) (*distlock.Lease, error) {
		return l.Acquire(ctx, key, owner, distlock.WithTTL(orphanTTL))
	})
	// The owner retries; the lost request has landed: the retry nests in
	// the hold it took, or finds the lock free if cleanup was quicker.
	lease, err := l.TryAcquire(ctxFor(t, 10*time.Second), key, owner, distlock.WithTTL(orphanTTL))
	if err != nil {
		t.Fatalf("the owner's retry after its lost request landed: %v, want it held (nested or fresh)", err)
	}
	mustRelease(t, lease)
	took := expectFreeSoon(t, b, key, "after the owner's retry of a lost request and its one Release")
	t.Logf("free %v after the owner's Release", took.Round(time.Millisecond))
	expectNothingHeld(t, h, "after the owner's retry of a lost request and its one Release")
}

// silentCall is one call made while a connection is silent.
type silentCall struct {
	name string
	call func(ctx context.Context) (*distlock.Lease, error)
}

func checkSilentConnection(t T, h *Harness) {
	holder := h.locker(t)
	l, link := needDirectedLink(t, h)
	busy, free := h.key(t, "silent-busy"), h.key(t, "silent-free")
	held := mustTry(t, holder, busy)
	defer func() { _ = held.Release(context.Background()) }()
	// Open every connection the calls use: commands, and the
	// notification channel of a waiting Acquire.
	mustRelease(t, mustTry(t, l, free))
	if _, err := l.Acquire(ctxFor(t, silentCtx), busy); err == nil {
		t.Fatalf("Acquire of a held lock succeeded")
	}
	// A backend may close the connection of a wait its ctx cut short
	// (postgres advisory does, its state being unknown): use one again.
	mustRelease(t, mustTry(t, l, free))
	n := min(link.Conns(), maxSilenced)
	if n == 0 {
		t.Fatalf("the link reports no open connection after the client used it")
	}
	calls := []silentCall{
		{"Acquire of a held lock", func(ctx context.Context) (*distlock.Lease, error) { return l.Acquire(ctx, busy) }},
		{"TryAcquire of a free lock", func(ctx context.Context) (*distlock.Lease, error) { return l.TryAcquire(ctx, free) }},
		{"Acquire of a free lock", func(ctx context.Context) (*distlock.Lease, error) { return l.Acquire(ctx, free+"/2") }},
	}
	// Each connection in turn, one way and then the other; then every
	// open connection at once, one way (a quorum backend waits for
	// several nodes' connections).
	type trial struct {
		what    string
		silence func() bool
	}
	var trials []trial
	for _, dir := range []struct {
		name    string
		silence func(int) bool
	}{{"requests", link.SilenceRequests}, {"replies", link.SilenceReplies}} {
		for i := 0; i < n; i++ {
			trials = append(trials, trial{fmt.Sprintf("connection %d of %d silent (%s)", i, n, dir.name), func() bool { return dir.silence(i) }})
		}
		trials = append(trials, trial{fmt.Sprintf("all %d connections silent (%s)", n, dir.name), func() bool {
			some := false
			for i := 0; i < n; i++ {
				some = dir.silence(i) || some
			}
			return some
		}})
	}
	silenced := 0
	for _, tr := range trials {
		if !tr.silence() {
			continue // the client closed it meanwhile
		}
		silenced++
		results := runSilent(t, calls)
		link.Heal()
		for _, r := range results {
			if r.d > silentCtx+slack.D(callSlack) {
				t.Errorf("%s: %s returned after %v, want within its %v ctx + %v", tr.what, r.name, r.d.Round(time.Millisecond), silentCtx, slack.D(callSlack))
			}
			if r.lease != nil {
				mustRelease(t, r.lease)
			}
		}
	}
	t.Logf("%d connections, %d one-way silences", n, silenced)
	// The client recovers once nothing is silent.
	lease, err := l.Acquire(ctxFor(t, 30*time.Second), h.key(t, "silent-after"))
	if err != nil {
		t.Fatalf("client not usable after its connections were silenced and healed: %v", err)
	}
	mustRelease(t, lease)
}

type callTime struct {
	name  string
	d     time.Duration
	lease *distlock.Lease // if the call succeeded
}

// runSilent makes the calls at once, each with ctx silentCtx, and returns
// how long each took and what it got.
func runSilent(t T, calls []silentCall) []callTime {
	out := make([]callTime, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(t.Context(), silentCtx)
			defer cancel()
			start := time.Now()
			lease, err := c.call(ctx)
			out[i] = callTime{name: c.name, d: time.Since(start)}
			if err == nil {
				out[i].lease = lease
			}
		}()
	}
	wg.Wait()
	return out
}
