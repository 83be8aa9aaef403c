package conformance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock"
)

// The operator checks: Inspect and ForceRelease, seen from another client
// than the holder's.

// inspect calls Locker.Inspect and skips the check when the backend
// cannot inspect locks.
func inspect(t T, l *distlock.Locker, key string) distlock.LockInfo {
	t.Helper()
	info, err := l.Inspect(ctxFor(t, 10*time.Second), key)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("backend cannot inspect locks: %v", err)
	}
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	if info.Key != key {
		t.Errorf("Inspect(%q).Key = %q", key, info.Key)
	}
	return info
}

// expectHolder asserts that info describes lease, held with holds nested
// holds and metadata md.
func expectHolder(t T, caps distlock.Capabilities, info distlock.LockInfo, lease *distlock.Lease, holds int, md string, ttl time.Duration) {
	t.Helper()
	if !info.Held || info.Owner != lease.Owner() || info.Metadata != md || info.Holds != holds {
		t.Errorf("Inspect of a lock held by %q (%d holds, metadata %q) = held %v, owner %q, %d holds, metadata %q",
			lease.Owner(), holds, md, info.Held, info.Owner, info.Holds, info.Metadata)
	}
	if caps.Fencing && info.Token != lease.Token() {
		t.Errorf("Inspect: token %d, the holder's lease has %d", info.Token, lease.Token())
	}
	switch {
	case info.SessionBound:
		if !caps.SessionBound || info.TTL != 0 {
			t.Errorf("Inspect: session-bound lock with TTL %v on a backend that claims SessionBound %v", info.TTL, caps.SessionBound)
		}
	case caps.Expiring:
		// The server's clock: allow a second of skew over the TTL asked.
		if info.TTL <= 0 || info.TTL > ttl+time.Second {
			t.Errorf("Inspect: TTL %v left of a lock taken with TTL %v", info.TTL, ttl)
		}
	default:
		t.Errorf("Inspect: neither SessionBound nor a TTL on a backend that claims neither Expiring nor SessionBound")
	}
	if info.Waiters < -1 {
		t.Errorf("Inspect: Waiters %d (want -1 for unknown, or a count)", info.Waiters)
	}
}

func checkInspect(t T, h *Harness) {
	holder, operator := h.locker(t), h.locker(t)
	caps := holder.Capabilities()
	key := h.key(t, "inspect")
	if info := inspect(t, operator, key); info.Held || info.Holds != 0 || info.Owner != "" {
		t.Fatalf("Inspect of a key never locked = %+v, want not held", info)
	}
	const ttl = 10 * time.Second
	md := "host=conformance pid=1 cmd=inspect ✓"
	owner := fmt.Sprintf("conf-inspect-%d", time.Now().UnixNano())
	lease := mustAcquire(t, holder, key, distlock.WithOwner(owner), distlock.WithMetadata(md), distlock.WithTTL(ttl))
	expectHolder(t, caps, inspect(t, operator, key), lease, 1, md, ttl)
	if caps.Reentrant {
		nested := mustAcquire(t, holder, key, distlock.WithOwner(owner), distlock.WithMetadata("nested"), distlock.WithTTL(ttl))
		expectHolder(t, caps, inspect(t, operator, key), lease, 2, md, ttl)
		mustRelease(t, nested)
		expectHolder(t, caps, inspect(t, operator, key), lease, 1, md, ttl)
	}
	// Inspect changes nothing: the holder's lease is intact.
	if err := lease.Refresh(ctxFor(t, 10*time.Second), ttl); err != nil {
		t.Errorf("Refresh after Inspect: %v", err)
	}
	checkWaiters(t, h, operator, key)
	mustRelease(t, lease)
	if info := inspect(t, operator, key); info.Held {
		t.Errorf("Inspect after Release = %+v, want not held", info)
	}
}

// checkWaiters: where the backend counts waiters, an Acquire queued on
// the held key shows as one, and is gone once it gives up.
func checkWaiters(t T, h *Harness, operator *distlock.Locker, key string) {
	t.Helper()
	if inspect(t, operator, key).Waiters == -1 {
		return
	}
	waiter := h.locker(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		lease, err := waiter.Acquire(ctx, key)
		if err == nil {
			_ = lease.Release(context.Background())
		}
		done <- err
	}()
	if !pollInspect(t, operator, key, func(i distlock.LockInfo) bool { return i.Waiters >= 1 }) {
		t.Errorf("Inspect: Waiters stayed %d while an Acquire waited for 10s", inspect(t, operator, key).Waiters)
	}
	cancel()
	if err := <-done; !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("waiting Acquire on a held lock, cancelled: %v, want ErrNotAcquired", err)
	}
	if !pollInspect(t, operator, key, func(i distlock.LockInfo) bool { return i.Waiters == 0 }) {
		t.Errorf("Inspect: Waiters %d 10s after the only waiter gave up", inspect(t, operator, key).Waiters)
	}
}

// pollInspect inspects key until ok holds, for at most 10s.
func pollInspect(t T, l *distlock.Locker, key string, ok func(distlock.LockInfo) bool) bool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ok(inspect(t, l, key)) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func checkForceRelease(t T, h *Harness) {
	holder, operator := h.locker(t), h.locker(t)
	caps := holder.Capabilities()
	key := h.key(t, "force")
	const ttl = 10 * time.Second
	force := func(opts ...distlock.ForceOption) distlock.LockInfo {
		t.Helper()
		info, err := operator.ForceRelease(ctxFor(t, 10*time.Second), key, opts...)
		if errors.Is(err, errors.ErrUnsupported) {
			t.Skipf("backend cannot force a release: %v", err)
		}
		if err != nil {
			t.Fatalf("ForceRelease(%q): %v", key, err)
		}
		return info
	}
	if info := force(); info.Held {
		t.Fatalf("ForceRelease of a free key = %+v, want not held", info)
	}
	victim := mustAcquire(t, holder, key, distlock.WithMetadata("victim"), distlock.WithTTL(ttl))
	// Conditional: another holder named, the lock stays as it is.
	wrong := []distlock.ForceOption{distlock.IfHeldBy("someone-else", 0)}
	if caps.Fencing { // the token is compared only where there is one
		wrong = append(wrong, distlock.IfHeldBy(victim.Owner(), victim.Token()+1))
	}
	for i, w := range wrong {
		if _, err := operator.ForceRelease(ctxFor(t, 10*time.Second), key, w); !errors.Is(err, distlock.ErrNotHeld) {
			t.Errorf("ForceRelease naming another holder (case %d) of a held lock: %v, want ErrNotHeld", i, err)
		}
	}
	expectHolder(t, caps, inspect(t, operator, key), victim, 1, "victim", ttl)
	evicted := force(distlock.IfHeldBy(victim.Owner(), victim.Token()))
	expectHolder(t, caps, evicted, victim, 1, "victim", ttl)
	// The lock is free at once, with a higher token.
	next := mustTry(t, operator, key, distlock.WithMetadata("next"), distlock.WithTTL(ttl))
	if caps.Fencing && next.Token() <= victim.Token() {
		t.Errorf("token after a forced release %d, the evicted holder's %d: want higher", next.Token(), victim.Token())
	}
	// The evicted holder is refused and its lease ends; the new owner's
	// lock is untouched.
	if err := victim.Refresh(ctxFor(t, 10*time.Second), ttl); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Refresh of the evicted lease: %v, want ErrNotHeld", err)
	}
	if err := victim.Release(ctxFor(t, 10*time.Second)); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Release of the evicted lease: %v, want ErrNotHeld", err)
	}
	select {
	case <-victim.Done():
		if !errors.Is(victim.Err(), distlock.ErrNotHeld) {
			t.Errorf("evicted lease ended with %v, want ErrLockLost or ErrNotHeld", victim.Err())
		}
	case <-time.After(10 * time.Second):
		t.Errorf("evicted lease still not Done 10s after its Refresh was refused")
	}
	expectHolder(t, caps, inspect(t, operator, key), next, 1, "next", ttl)
	mustRelease(t, next)
}
