package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// Checks returns every check, in the order they run.
func Checks() []Check {
	return append([]Check{
		{"mutual-exclusion", "at no moment do two owners hold the same key while their leases are valid", false, checkMutualExclusion},
		{"try-acquire-held", "TryAcquire makes one attempt and returns ErrNotAcquired at once if another owner holds the lock", false, checkTryAcquireHeld},
		{"acquire-waits", "Acquire blocks until the lock is held, and wins promptly after a release", false, checkAcquireWaits},
		{"acquire-deadline", "Acquire honours ctx: on deadline it returns ErrNotAcquired and the ctx error promptly and leaves nothing behind", false, checkAcquireDeadline},
		{"acquire-cancel", "Acquire honours ctx: on cancel it returns ErrNotAcquired and context.Canceled promptly and leaves nothing behind", false, checkAcquireCancel},
		{"expired-release", "owner-checked release and refresh: A's lease expires, B acquires, A's Release and Refresh get ErrNotHeld and B's lock stays intact", false, checkExpiredRelease},
		{"stale-holder", "Release and Refresh are owner-checked in the backend: a holder whose lock the backend dropped gets ErrNotHeld and never touches the new owner's lock", false, checkStaleHolder},
		{"double-release", "Release of a lease already released returns ErrNotHeld and changes nothing", false, checkDoubleRelease},
		{"refresh-extends", "Refresh is an owner-checked extension past the original TTL", false, checkRefreshExtends},
		{"auto-refresh", "with auto-refresh (the default) a lease is held past its TTL until Release", false, checkAutoRefresh},
		{"holder-superseded", "a holder that never releases is superseded after its TTL; its Done closes with ErrLockLost no later than another owner acquires", false, checkHolderSuperseded},
		{"distinct-owners", "without WithOwner every acquisition is a distinct owner: two acquisitions never share a lock", false, checkDistinctOwners},
		{"reentrant", "acquisitions with the same WithOwner id nest, and the lock is free only when every one of them is released", false, checkReentrant},
		{"fencing", "Token is strictly increasing per key for every new acquisition, across owners and expiry takeovers; a reentrant acquire keeps the holder's token", false, checkFencing},
		{"keys", "any valid UTF-8 key of 1 to 1024 bytes works and names a distinct lock; anything else is ErrInvalidKey", false, checkKeys},
		{"ttl", "TTL <= 0 gets ErrInvalidTTL, with no backend call", false, checkTTL},
		{"lease-context", "a lease's Done and Context end when it is released; Do runs fn under the lock and releases it", false, checkLeaseContext},
		{"close", "Close ends in-flight acquisitions with ErrClosed, releases held leases, and is idempotent", false, checkClose},
		{"notify", "capability Notify: waiters are woken by the backend, not by polling", false, checkNotify},
		{"fair", "capability Fair: waiters acquire in arrival order", false, checkFair},
		{"session-bound", "capability SessionBound: the backend frees the lock when the holder's session dies", false, checkSessionBound},
		{"observer", "an Observer sees every acquisition start and end, refresh, release, loss and close, in order, with its outcome", false, checkObserver},
		{"inspect", "Inspect shows, from another client, the holder's owner, metadata, token, holds, server-side TTL and waiters, and changes nothing", false, checkInspect},
		{"force-release", "ForceRelease frees a lock whatever its owner: the next token is higher, the evicted lease is refused and ends, the new owner's lock is untouched", false, checkForceRelease},
		{"durable", "capability Durable: a held lock survives a backend restart", true, checkDurable},
	}, slices.Concat(edgeChecks(), jobChecks(), faultChecks(), electionChecks(), semaphoreChecks(), multiChecks())...)
}

// Helpers.

var keySeq atomic.Uint64

// key returns a key unique to this run of this check.
func (h *Harness) key(t T, name string) string {
	return fmt.Sprintf("%sconf/%d/%d/%s", h.KeyPrefix, time.Now().UnixNano(), keySeq.Add(1), name)
}

// locker opens a new Locker, connected, that is closed when the check
// ends.
func (h *Harness) locker(t T) *distlock.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	l, err := h.NewLocker(ctx)
	if err != nil {
		t.Fatalf("harness NewLocker: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	// Warm, as a long-lived Locker is: the first round trips (dial, TLS,
	// a session, a Cluster's slot map, script loading) are not counted in
	// the validity of the first lease a check takes.
	lease, err := l.TryAcquire(ctx, h.key(t, "warm"))
	if err != nil {
		t.Fatalf("harness Locker's warm-up TryAcquire of a free lock: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("harness Locker's warm-up Release: %v", err)
	}
	return l
}

func ctxFor(t T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t T, l *distlock.Locker, key string, opts ...distlock.Option) *distlock.Lease {
	t.Helper()
	lease, err := l.Acquire(ctxFor(t, 30*time.Second), key, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return lease
}

func mustTry(t T, l *distlock.Locker, key string, opts ...distlock.Option) *distlock.Lease {
	t.Helper()
	lease, err := l.TryAcquire(ctxFor(t, 10*time.Second), key, opts...)
	if err != nil {
		t.Fatalf("TryAcquire(%q) on a free lock: %v", key, err)
	}
	return lease
}

func mustRelease(t T, lease *distlock.Lease) {
	t.Helper()
	if err := lease.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release(%q): %v", lease.Key(), err)
	}
}

// expectBusy asserts that TryAcquire finds key held by another owner.
func expectBusy(t T, l *distlock.Locker, key, why string) {
	t.Helper()
	lease, err := l.TryAcquire(ctxFor(t, 10*time.Second), key)
	if err == nil {
		_ = lease.Release(context.Background())
		t.Fatalf("%s: TryAcquire(%q) succeeded, want ErrNotAcquired", why, key)
	}
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("%s: TryAcquire(%q) = %v, want ErrNotAcquired", why, key, err)
	}
}

// expectFree asserts that key can be taken within d (nothing left behind),
// and releases it.
func expectFree(t T, l *distlock.Locker, key string, d time.Duration, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	lease, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("%s: Acquire(%q) within %v: %v", why, key, d, err)
	}
	mustRelease(t, lease)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func needs(t T, have bool, capability string) {
	t.Helper()
	if !have {
		t.Skipf("backend does not claim %s", capability)
	}
}

// The checks.

func checkMutualExclusion(t T, h *Harness) {
	const (
		lockers    = 4
		goroutines = 16
	)
	total := int64(rounds(2000))
	key := h.key(t, "mutex")
	ls := make([]*distlock.Locker, lockers)
	for i := range ls {
		ls[i] = h.locker(t)
	}
	fencing := ls[0].Capabilities().Fencing
	var (
		inside    atomic.Int32 // the independent witness: holders right now
		overlaps  atomic.Int64
		done      atomic.Int64
		lastToken atomic.Uint64
		tokenErrs atomic.Int64
		firstErr  error
		errOnce   sync.Once
		wg        sync.WaitGroup
	)
	ctx := ctxFor(t, 5*time.Minute)
	fail := func(err error) { errOnce.Do(func() { firstErr = err }) }
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(l *distlock.Locker) {
			defer wg.Done()
			for done.Load() < total && ctx.Err() == nil {
				lease, err := l.Acquire(ctx, key)
				if err != nil {
					fail(fmt.Errorf("Acquire: %w", err))
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				runtime.Gosched() // widen the window in which an overlap is seen
				if fencing {
					if prev := lastToken.Swap(lease.Token()); lease.Token() <= prev {
						tokenErrs.Add(1)
					}
				}
				done.Add(1)
				inside.Add(-1)
				if err := lease.Release(ctx); err != nil {
					fail(fmt.Errorf("Release: %w", err))
					return
				}
			}
		}(ls[g%lockers])
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("%d goroutines over %d Lockers: %v", goroutines, lockers, firstErr)
	}
	if n := done.Load(); n < total {
		t.Fatalf("only %d of %d critical sections ran before the deadline", n, total)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping critical sections in %d acquisitions", n, done.Load())
	}
	if n := tokenErrs.Load(); n != 0 {
		t.Errorf("%d fencing tokens did not increase over the previous holder's", n)
	}
}

func checkTryAcquireHeld(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	key := h.key(t, "try")
	lease := mustTry(t, a, key)
	start := time.Now()
	for i := 0; i < 3; i++ {
		expectBusy(t, b, key, "lock held by another Locker")
	}
	if d := time.Since(start); d > slack.D(3*time.Second) {
		t.Errorf("three TryAcquire calls on a held lock took %v: TryAcquire must not wait", d)
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("holder's lease ended after others' failed TryAcquire: %v", err)
	}
	if err := lease.Refresh(ctxFor(t, 10*time.Second), distlock.DefaultTTL); err != nil {
		t.Fatalf("holder's Refresh after others' failed TryAcquire: %v", err)
	}
	mustRelease(t, lease)
	// No side effect: the failed attempts left nothing that blocks.
	lease = mustTry(t, b, key)
	mustRelease(t, lease)
}

func checkAcquireWaits(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	key := h.key(t, "waits")
	holder := mustTry(t, a, key)
	type result struct {
		lease *distlock.Lease
		err   error
		at    time.Time
	}
	got := make(chan result, 1)
	go func() {
		lease, err := b.Acquire(ctxFor(t, time.Minute), key)
		got <- result{lease, err, time.Now()}
	}()
	select {
	case r := <-got:
		t.Fatalf("Acquire returned while the lock was held: lease=%v err=%v", r.lease != nil, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	released := time.Now()
	mustRelease(t, holder)
	r := <-got
	if r.err != nil {
		t.Fatalf("waiting Acquire: %v", r.err)
	}
	if lag := r.at.Sub(released); lag > slack.D(2*time.Second) {
		t.Errorf("waiter acquired %v after the release; want promptly (< 2s)", lag)
	}
	mustRelease(t, r.lease)
}

func checkAcquireCtx(t T, h *Harness, cancelIt bool) {
	a, b, c := h.locker(t), h.locker(t), h.locker(t)
	key := h.key(t, "ctx")
	holder := mustTry(t, a, key)
	const wait = 300 * time.Millisecond
	var (
		ctx    context.Context
		cancel context.CancelFunc
		want   error
	)
	if cancelIt {
		ctx, cancel = context.WithCancel(t.Context())
		time.AfterFunc(wait, cancel)
		want = context.Canceled
	} else {
		ctx, cancel = context.WithTimeout(t.Context(), wait)
		want = context.DeadlineExceeded
	}
	defer cancel()
	start := time.Now()
	lease, err := b.Acquire(ctx, key)
	took := time.Since(start)
	if err == nil {
		_ = lease.Release(context.Background())
		t.Fatalf("Acquire of a held lock succeeded")
	}
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, want) {
		t.Errorf("Acquire error %v: want errors.Is ErrNotAcquired and %v", err, want)
	}
	if took > wait+slack.D(time.Second) {
		t.Errorf("Acquire returned %v after its ctx ended; want promptly (< 1s)", took-wait)
	}
	mustRelease(t, holder)
	// Nothing left behind: a third client takes the lock at once.
	expectFree(t, c, key, 2*time.Second, "after the abandoned Acquire")
}

func checkAcquireDeadline(t T, h *Harness) { checkAcquireCtx(t, h, false) }
func checkAcquireCancel(t T, h *Harness)   { checkAcquireCtx(t, h, true) }

// waitLost waits for a lease to end on its own within d.
func waitLost(t T, lease *distlock.Lease, d time.Duration) {
	t.Helper()
	select {
	case <-lease.Done():
	case <-time.After(d):
		t.Fatalf("lease of %q still not ended %v after its TTL", lease.Key(), d)
	}
	if err := lease.Err(); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("lease ended with %v, want ErrLockLost", err)
	}
}

func checkExpiredRelease(t T, h *Harness) {
	a, b, c := h.locker(t), h.locker(t), h.locker(t)
	needs(t, a.Capabilities().Expiring, "Expiring")
	key, ttl := h.key(t, "seeds"), h.ttl()
	leaseA := mustTry(t, a, key, distlock.WithTTL(ttl), distlock.WithAutoRefresh(false))
	waitLost(t, leaseA, 2*ttl+time.Second)
	leaseB, err := b.Acquire(ctxFor(t, 3*ttl+5*time.Second), key)
	if err != nil {
		t.Fatalf("B could not acquire after A's TTL: %v", err)
	}
	if err := leaseA.Release(ctxFor(t, 10*time.Second)); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("A's Release after expiry = %v, want ErrNotHeld", err)
	}
	if err := leaseA.Refresh(ctxFor(t, 10*time.Second), time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("A's Refresh after expiry = %v, want ErrNotHeld", err)
	}
	expectBusy(t, c, key, "B's lock after A's stale Release and Refresh")
	if err := leaseB.Err(); err != nil {
		t.Errorf("B's lease ended after A's stale calls: %v", err)
	}
	mustRelease(t, leaseB)
}

func checkDoubleRelease(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	key := h.key(t, "double")
	lease := mustTry(t, a, key)
	mustRelease(t, lease)
	if err := lease.Release(ctxFor(t, 10*time.Second)); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("second Release = %v, want ErrNotHeld", err)
	}
	// The second Release must not touch a new owner's lock.
	other := mustTry(t, b, key)
	if err := lease.Release(ctxFor(t, 10*time.Second)); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("third Release = %v, want ErrNotHeld", err)
	}
	expectBusy(t, a, key, "new owner's lock after a stale Release")
	mustRelease(t, other)
	if !isClosed(lease.Done()) {
		t.Errorf("Done not closed after Release")
	}
}

func checkRefreshExtends(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	needs(t, a.Capabilities().Expiring, "Expiring")
	key, ttl := h.key(t, "refresh"), h.ttl()
	lease := mustTry(t, a, key, distlock.WithTTL(ttl), distlock.WithAutoRefresh(false))
	first := lease.Deadline()
	time.Sleep(ttl / 4)
	if err := lease.Refresh(ctxFor(t, 10*time.Second), 4*ttl); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if !lease.Deadline().After(first) {
		t.Errorf("Deadline did not move after Refresh: %v then %v", first, lease.Deadline())
	}
	time.Sleep(ttl + ttl/2) // past the original TTL
	expectBusy(t, b, key, "lock refreshed past its original TTL")
	if err := lease.Err(); err != nil {
		t.Fatalf("refreshed lease ended: %v", err)
	}
	mustRelease(t, lease)
}

func checkAutoRefresh(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	needs(t, a.Capabilities().Expiring, "Expiring")
	key, ttl := h.key(t, "auto"), h.ttl()
	lease := mustTry(t, a, key, distlock.WithTTL(ttl))
	time.Sleep(3 * ttl)
	expectBusy(t, b, key, "auto-refreshed lock after 3 TTLs")
	if err := lease.Err(); err != nil {
		t.Fatalf("auto-refreshed lease ended: %v", err)
	}
	mustRelease(t, lease)
}

func checkHolderSuperseded(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	needs(t, a.Capabilities().Expiring, "Expiring")
	key, ttl := h.key(t, "superseded"), h.ttl()
	start := time.Now()
	leaseA := mustTry(t, a, key, distlock.WithTTL(ttl), distlock.WithAutoRefresh(false))
	leaseB, err := b.Acquire(ctxFor(t, 3*ttl+5*time.Second), key)
	if err != nil {
		t.Fatalf("B could not acquire after A's TTL: %v", err)
	}
	took := time.Since(start)
	if !isClosed(leaseA.Done()) {
		t.Errorf("B acquired after %v but A's Done is still open: loss must be reported no later than another owner acquires", took)
	} else if err := leaseA.Err(); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("A's lease ended with %v, want ErrLockLost", err)
	}
	if dl := leaseA.Deadline(); !dl.IsZero() && time.Now().Before(dl) {
		t.Errorf("B acquired %v after A, before A's own validity deadline (%v left): two owners held the lock", took, time.Until(dl))
	}
	if err := leaseA.Context().Err(); err == nil {
		t.Errorf("A's Context not cancelled after loss")
	}
	mustRelease(t, leaseB)
}

func checkDistinctOwners(t T, h *Harness) {
	a := h.locker(t)
	key := h.key(t, "owners")
	first := mustTry(t, a, key)
	expectBusy(t, a, key, "second acquisition without WithOwner on the same Locker")
	_, err := a.TryAcquire(ctxFor(t, 10*time.Second), key, distlock.WithOwner("someone-else"))
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("TryAcquire with another owner id = %v, want ErrNotAcquired", err)
	}
	mustRelease(t, first)
	x := mustTry(t, a, key, distlock.WithOwner("x"))
	_, err = a.TryAcquire(ctxFor(t, 10*time.Second), key, distlock.WithOwner("y"))
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("owner y's TryAcquire while owner x holds = %v, want ErrNotAcquired", err)
	}
	mustRelease(t, x)
}

func checkReentrant(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	needs(t, a.Capabilities().Reentrant, "Reentrant")
	key := h.key(t, "reentrant")
	owner := distlock.WithOwner("owner-" + key[len(key)-8:])
	l1 := mustTry(t, a, key, owner)
	start := time.Now()
	l2, err := a.Acquire(ctxFor(t, 10*time.Second), key, owner)
	if err != nil {
		t.Fatalf("reentrant Acquire: %v", err)
	}
	if d := time.Since(start); d > slack.D(2*time.Second) {
		t.Errorf("reentrant Acquire took %v, want at once", d)
	}
	l3 := mustTry(t, a, key, owner)
	if l2.Token() != l1.Token() || l3.Token() != l1.Token() {
		t.Errorf("reentrant tokens %d, %d, want the holder's %d", l2.Token(), l3.Token(), l1.Token())
	}
	expectBusy(t, b, key, "lock held three times")
	mustRelease(t, l1)
	if err := l1.Release(ctxFor(t, 10*time.Second)); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("double Release of one nested lease = %v, want ErrNotHeld", err)
	}
	expectBusy(t, b, key, "lock with two holds left (a double Release must not free a hold)")
	mustRelease(t, l3)
	expectBusy(t, b, key, "lock with one hold left")
	if err := l2.Refresh(ctxFor(t, 10*time.Second), distlock.DefaultTTL); err != nil {
		t.Errorf("Refresh of the last nested lease: %v", err)
	}
	mustRelease(t, l2)
	expectFree(t, b, key, 2*time.Second, "after every nested hold was released")
}

func checkFencing(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	caps := a.Capabilities()
	needs(t, caps.Fencing, "Fencing")
	key := h.key(t, "fence")
	var tokens []uint64
	l1 := mustTry(t, a, key)
	tokens = append(tokens, l1.Token())
	mustRelease(t, l1)
	l2 := mustTry(t, b, key)
	tokens = append(tokens, l2.Token())
	mustRelease(t, l2)
	l3 := mustTry(t, a, key)
	tokens = append(tokens, l3.Token())
	mustRelease(t, l3)
	if caps.Expiring {
		ttl := h.ttl()
		l4 := mustTry(t, a, key, distlock.WithTTL(ttl), distlock.WithAutoRefresh(false))
		tokens = append(tokens, l4.Token())
		l5, err := b.Acquire(ctxFor(t, 3*ttl+5*time.Second), key)
		if err != nil {
			t.Fatalf("takeover after expiry: %v", err)
		}
		tokens = append(tokens, l5.Token())
		mustRelease(t, l5)
	}
	owner := distlock.WithOwner("fence-owner")
	r1 := mustTry(t, b, key, owner)
	r2 := mustTry(t, b, key, owner)
	tokens = append(tokens, r1.Token())
	if r2.Token() != r1.Token() {
		t.Errorf("reentrant acquire got token %d, want the holder's %d", r2.Token(), r1.Token())
	}
	mustRelease(t, r2)
	mustRelease(t, r1)
	for i, tok := range tokens {
		if tok == 0 {
			t.Errorf("token %d is 0 on a Fencing backend", i)
		}
		if i > 0 && tok <= tokens[i-1] {
			t.Errorf("tokens not strictly increasing: %v", tokens)
			break
		}
	}
}

func checkStaleHolder(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	if h.Faults.Expire == nil {
		t.Skipf("the harness cannot expire a lock server-side (Faults.Expire)")
	}
	key := h.key(t, "stale")
	for _, op := range []string{"Refresh", "Release"} {
		stale := mustTry(t, a, key, distlock.WithAutoRefresh(false))
		if err := h.Faults.Expire(ctxFor(t, 10*time.Second), key); err != nil {
			t.Fatalf("Expire: %v", err)
		}
		other, err := b.Acquire(ctxFor(t, 10*time.Second), key)
		if err != nil {
			t.Fatalf("acquire after the backend dropped the lock: %v", err)
		}
		// A backend that tells the holder of a third-party deletion (a
		// watch on its own node) may end the stale lease first: then
		// Refresh and Release must refuse locally, which the rest checks
		// just the same.
		toldAtOnce := stale.Err() != nil
		if toldAtOnce && !errors.Is(stale.Err(), distlock.ErrLockLost) {
			t.Errorf("stale lease ended with %v, want ErrLockLost", stale.Err())
		}
		if op == "Refresh" {
			err = stale.Refresh(ctxFor(t, 10*time.Second), time.Minute)
		} else {
			err = stale.Release(ctxFor(t, 10*time.Second))
		}
		if !errors.Is(err, distlock.ErrNotHeld) {
			t.Errorf("stale holder's %s = %v, want ErrNotHeld", op, err)
		}
		expectBusy(t, a, key, "new owner's lock after the stale holder's "+op)
		if err := other.Refresh(ctxFor(t, 10*time.Second), distlock.DefaultTTL); err != nil {
			t.Errorf("new owner's Refresh after the stale holder's %s: %v", op, err)
		}
		mustRelease(t, other)
		if op == "Refresh" && !toldAtOnce && !errors.Is(stale.Err(), distlock.ErrLockLost) {
			t.Errorf("stale lease after a refused Refresh: Err = %v, want ErrLockLost", stale.Err())
		}
	}
}
