package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/distlock/distlock"
)

// jobChecks are the checks of the scheduled-job helpers: TryDo and
// WithMinHold.
func jobChecks() []Check {
	return []Check{
		{"try-do", "TryDo runs fn once when the lock is free and reports it; when another owner holds the lock it returns false and no error at once, without running fn", false, checkTryDo},
		{"min-hold", "a lease released within its minimum hold (WithMinHold) leaves the lock taken, from another client, until the minimum hold has passed since the acquisition, and then frees it", false, checkMinHold},
	}
}

func checkTryDo(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	key := h.key(t, "trydo")
	runs := 0
	ran, err := a.TryDo(ctxFor(t, 30*time.Second), key, func(ctx context.Context) error {
		runs++
		other, err := b.TryDo(ctxFor(t, 30*time.Second), key, func(context.Context) error {
			runs++
			return nil
		})
		if err != nil || other {
			t.Errorf("TryDo from another client while fn runs under the lock = %v, %v; want false, nil", other, err)
		}
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("TryDo on a free lock = %v, %v; want true, nil", ran, err)
	}
	if runs != 1 {
		t.Errorf("fn ran %d times, want once", runs)
	}
	expectFree(t, b, key, 10*time.Second, "after TryDo")
}

func checkMinHold(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	key := h.key(t, "minhold")
	// Longer than the backend's expiry granularity (memcached's whole
	// seconds) and than the suite's TTL, which the hold must outlive.
	hold := max(2*time.Second, 3*h.ttl())
	start := time.Now()
	lease, err := a.TryAcquire(ctxFor(t, 30*time.Second), key, distlock.WithTTL(h.ttl()), distlock.WithMinHold(hold))
	if err != nil {
		t.Fatalf("TryAcquire with WithMinHold(%v): %v", hold, err)
	}
	if err := lease.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release within the minimum hold: %v", err)
	}
	if lease.Err() == nil {
		t.Errorf("the lease still reports itself held after Release")
	}
	expectBusy(t, b, key, "within the minimum hold, after Release")
	caps := b.Capabilities()
	bound := hold + h.takeoverBound(caps) + 10*time.Second
	next, err := b.Acquire(ctxFor(t, bound), key)
	if err != nil {
		t.Fatalf("lock not free %v after a released lease's %v minimum hold: %v", bound, hold, err)
	}
	// Acquire returned after the grant, so the grant came no later than
	// now; it must come no sooner than the end of the minimum hold,
	// counted from before the first acquisition was sent.
	if took := time.Since(start); took < hold {
		t.Errorf("another owner acquired %v after the acquisition, within its %v minimum hold", took, hold)
	}
	t.Logf("free %v after the acquisition (minimum hold %v)", time.Since(start).Round(time.Millisecond), hold)
	mustRelease(t, next)
	if err := lease.Release(ctxFor(t, 10*time.Second)); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("a second Release of the lease: %v, want ErrNotHeld", err)
	}
}
