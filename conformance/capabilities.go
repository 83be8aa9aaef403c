package conformance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
)

func checkNotify(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	needs(t, a.Capabilities().Notify, "Notify")
	key := h.key(t, "notify")
	holder := mustTry(t, a, key)
	// A retry policy that would sleep for a minute: only a notification
	// can wake the waiter promptly.
	slow := distlock.WithRetry(distlock.Backoff{Min: time.Minute, Max: time.Minute})
	got := make(chan error, 1)
	var at time.Time
	go func() {
		lease, err := b.Acquire(ctxFor(t, 2*time.Minute), key, slow)
		at = time.Now()
		if err == nil {
			err = lease.Release(context.Background())
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	released := time.Now()
	mustRelease(t, holder)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("notified Acquire: %v", err)
		}
		if lag := at.Sub(released); lag > slack.D(time.Second) {
			t.Errorf("waiter woke %v after the release; a notified waiter wakes at once", lag)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("waiter not woken 10s after the release: no notification")
	}
}

func checkFair(t T, h *Harness) {
	a := h.locker(t)
	needs(t, a.Capabilities().Fair, "Fair")
	key := h.key(t, "fair")
	holder := mustTry(t, a, key)
	const n = 4
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	counted := countsWaiters(t, a, key)
	for i := 0; i < n; i++ {
		l := h.locker(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := l.Acquire(ctxFor(t, time.Minute), key)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			_ = lease.Release(context.Background())
		}()
		// Arrival order: each waiter queues before the next starts.
		// Where the backend counts waiters, until it counts this one (a
		// pause alone lets a loaded machine reorder them); else 150ms.
		if !counted || !waitWaiters(t, a, key, i+1) {
			time.Sleep(150 * time.Millisecond)
		}
	}
	mustRelease(t, holder)
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Errorf("waiters acquired in order %v, want arrival order 0..%d", order, n-1)
			break
		}
	}
}

func checkSessionBound(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	needs(t, a.Capabilities().SessionBound, "SessionBound")
	if h.Faults.KillClient == nil {
		t.Skipf("the harness cannot kill a client session (Faults.KillClient)")
	}
	key := h.key(t, "session")
	lease := mustTry(t, a, key, distlock.WithTTL(10*time.Minute))
	if err := h.Faults.KillClient(a); err != nil {
		t.Fatalf("KillClient: %v", err)
	}
	start := time.Now()
	other, err := b.Acquire(ctxFor(t, h.sessionTimeout()+10*time.Second), key)
	if err != nil {
		t.Fatalf("lock of a dead session not freed within the session timeout %v: %v", h.sessionTimeout(), err)
	}
	t.Logf("dead session's lock taken over after %v", time.Since(start))
	mustRelease(t, other)
	_ = lease
}

func checkDurable(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	needs(t, a.Capabilities().Durable, "Durable")
	if h.Faults.RestartBackend == nil {
		t.Skipf("the harness cannot restart the backend (Faults.RestartBackend)")
	}
	key := h.key(t, "durable")
	lease := mustTry(t, a, key, distlock.WithTTL(time.Minute))
	if err := h.Faults.RestartBackend(ctxFor(t, 2*time.Minute)); err != nil {
		t.Fatalf("RestartBackend: %v", err)
	}
	// Clients reconnect; the lock must still be held.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := b.TryAcquire(ctxFor(t, 10*time.Second), key)
		if errors.Is(err, distlock.ErrNotAcquired) {
			break
		}
		if err == nil {
			t.Fatalf("lock free after the backend restarted")
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend not serving 30s after restart: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := lease.Release(ctxFor(t, 30*time.Second)); err != nil {
		t.Fatalf("Release after restart: %v", err)
	}
	expectFree(t, b, key, 5*time.Second, "after release following the restart")
}

// countsWaiters reports whether Inspect on l counts the waiters of key.
func countsWaiters(t T, l *distlock.Locker, key string) bool {
	info, err := l.Inspect(ctxFor(t, 10*time.Second), key)
	return err == nil && info.Waiters >= 0
}

// waitWaiters waits (up to 10s, scaled by the slack factor) until Inspect
// on l counts at least n waiters of key; false if it did not.
func waitWaiters(t T, l *distlock.Locker, key string, n int) bool {
	deadline := time.Now().Add(slack.D(10 * time.Second))
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		info, err := l.Inspect(ctx, key)
		cancel()
		if err == nil && info.Waiters >= n {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}
