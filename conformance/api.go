package conformance

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/distlock/distlock"
)

func checkKeys(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	ctx := ctxFor(t, 2*time.Minute)
	for _, bad := range []struct{ name, key string }{
		{"empty", ""},
		{"1025 bytes", strings.Repeat("k", 1025)},
		{"invalid UTF-8", "bad\xff\xfekey"},
	} {
		for _, op := range []string{"TryAcquire", "Acquire"} {
			var err error
			if op == "Acquire" {
				_, err = a.Acquire(ctx, bad.key)
			} else {
				_, err = a.TryAcquire(ctx, bad.key)
			}
			if !errors.Is(err, distlock.ErrInvalidKey) {
				t.Errorf("%s with %s key = %v, want ErrInvalidKey", op, bad.name, err)
			}
		}
	}
	base := h.key(t, "keys/")
	long := base + strings.Repeat("L", 1024-len(base))
	common := base + strings.Repeat("p", 260)
	keys := []string{
		long, long[:1023],
		base + "a/b", base + "a", base + "..", base + ".", base + "/", base + "a b", base + "a\tb",
		base + "a\nb", base + "a%2Fb", base + "a:b", base + "a*b?", base + "ключ", base + "🔒",
		base + "\U0010FFFD", base + "\uE000", base + "a\x00b", base + "a\x7fb",
		base + "Key", base + "key", base + "KEY", base + "k", base + "k ", base + " k",
		common + "x", common + "y",
		base + "'; DROP TABLE locks; --", base + `"quoted"\`, base + "{tag}", base + "%s%d",
	}
	var leases []*distlock.Lease
	defer func() {
		for _, l := range leases {
			_ = l.Release(context.Background())
		}
	}()
	for _, k := range keys {
		lease, err := a.TryAcquire(ctx, k)
		if err != nil {
			t.Errorf("TryAcquire(%q) (%d bytes): %v — every valid key must work and name a distinct lock", k, len(k), err)
			continue
		}
		if lease.Key() != k {
			t.Errorf("lease.Key() = %q, want %q", lease.Key(), k)
		}
		leases = append(leases, lease)
	}
	for _, l := range leases {
		if _, err := b.TryAcquire(ctx, l.Key()); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("key %q (%d bytes) not locked for another client: %v", l.Key(), len(l.Key()), err)
		}
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release(%q): %v", l.Key(), err)
		}
	}
	leases = nil
}

func checkTTL(t T, h *Harness) {
	a := h.locker(t)
	key := h.key(t, "ttl")
	ctx := ctxFor(t, 30*time.Second)
	for _, ttl := range []time.Duration{0, -1, -time.Second, time.Duration(-1 << 63)} {
		if _, err := a.TryAcquire(ctx, key, distlock.WithTTL(ttl)); !errors.Is(err, distlock.ErrInvalidTTL) {
			t.Errorf("TryAcquire with TTL %v = %v, want ErrInvalidTTL", ttl, err)
		}
		if _, err := a.Acquire(ctx, key, distlock.WithTTL(ttl)); !errors.Is(err, distlock.ErrInvalidTTL) {
			t.Errorf("Acquire with TTL %v = %v, want ErrInvalidTTL", ttl, err)
		}
	}
	lease := mustTry(t, a, key)
	if err := lease.Refresh(ctx, 0); !errors.Is(err, distlock.ErrInvalidTTL) {
		t.Errorf("Refresh(0) = %v, want ErrInvalidTTL", err)
	}
	if err := lease.Err(); err != nil {
		t.Errorf("lease ended after an invalid Refresh: %v", err)
	}
	mustRelease(t, lease)
}

func checkLeaseContext(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	key := h.key(t, "context")
	lease := mustTry(t, a, key)
	ctx := lease.Context()
	if ctx.Err() != nil || isClosed(lease.Done()) || lease.Err() != nil {
		t.Fatalf("fresh lease already ended: %v", lease.Err())
	}
	mustRelease(t, lease)
	if ctx.Err() == nil || !isClosed(lease.Done()) {
		t.Errorf("Context or Done still open after Release")
	}
	if err := context.Cause(ctx); !errors.Is(err, distlock.ErrNotHeld) || errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("context cause after Release = %v, want ErrNotHeld (not ErrLockLost)", err)
	}
	ran := false
	err := a.Do(ctxFor(t, 30*time.Second), key, func(ctx context.Context) error {
		ran = true
		expectBusy(t, b, key, "inside Do")
		return ctx.Err()
	})
	if err != nil || !ran {
		t.Errorf("Do: ran=%v err=%v", ran, err)
	}
	expectFree(t, b, key, 2*time.Second, "after Do returned")
	sentinel := errors.New("fn failed")
	if err := a.Do(ctxFor(t, 30*time.Second), key, func(context.Context) error { return sentinel }); !errors.Is(err, sentinel) {
		t.Errorf("Do returned %v, want fn's error", err)
	}
	expectFree(t, b, key, 2*time.Second, "after Do's fn failed")
}

func checkClose(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	key, key2 := h.key(t, "close"), h.key(t, "close2")
	held := mustTry(t, a, key)
	blocker := mustTry(t, b, key2)
	waiting := make(chan error, 1)
	go func() {
		_, err := a.Acquire(ctxFor(t, time.Minute), key2)
		waiting <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case err := <-waiting:
		if !errors.Is(err, distlock.ErrClosed) {
			t.Errorf("in-flight Acquire ended with %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("in-flight Acquire still blocked 5s after Close")
	}
	if !isClosed(held.Done()) || !errors.Is(held.Err(), distlock.ErrClosed) {
		t.Errorf("held lease after Close: done=%v err=%v, want ended with ErrClosed", isClosed(held.Done()), held.Err())
	}
	expectFree(t, b, key, 2*time.Second, "lock held by a closed Locker")
	if _, err := a.TryAcquire(ctxFor(t, time.Second), key); !errors.Is(err, distlock.ErrClosed) {
		t.Errorf("TryAcquire after Close = %v, want ErrClosed", err)
	}
	if _, err := a.Acquire(ctxFor(t, time.Second), key); !errors.Is(err, distlock.ErrClosed) {
		t.Errorf("Acquire after Close = %v, want ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	mustRelease(t, blocker)
}
