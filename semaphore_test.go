package distlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/memory"
	"github.com/stretchr/testify/require"
)

func newSem(t *testing.T, l *distlock.Locker, key string, n int) *distlock.Semaphore {
	t.Helper()
	s, err := l.Semaphore(key, n)
	if err != nil {
		t.Fatalf("Semaphore: %v", err)
	}
	return s
}

func memLocker(t *testing.T, ns *memory.Namespace) *distlock.Locker {
	t.Helper()
	l := memory.MustNew(ns)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestSemaphoreAtMostNPermits(t *testing.T) {
	ns := memory.NewNamespace()
	a, b := memLocker(t, ns), memLocker(t, ns)
	ctx := context.Background()
	var held []*distlock.Lease
	var last uint64
	for i := range 3 {
		l := []*distlock.Locker{a, b}[i%2]
		p, err := newSem(t, l, "jobs", 3).TryAcquire(ctx)
		require.NoError(t, err, "permit %d", i)
		if p.Token() <= last {
			t.Fatalf("token %d after %d: not increasing", p.Token(), last)
		}
		last = p.Token()
		held = append(held, p)
	}
	if _, err := newSem(t, b, "jobs", 3).TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("fourth permit of 3: %v, want ErrNotAcquired", err)
	}
	// A lock of the same key is another namespace.
	lk, err := a.TryAcquire(ctx, "jobs")
	require.NoError(t, err, "lock of the semaphore's key")
	_ = lk.Release(ctx)
	require.NoError(t, held[1].Release(ctx))
	require.ErrorIs(t, held[1].Release(ctx), distlock.ErrNotHeld, "second Release")
	p, err := newSem(t, b, "jobs", 3).TryAcquire(ctx)
	require.NoError(t, err, "permit after a release")
	if p.Token() <= last {
		t.Fatalf("token %d after %d", p.Token(), last)
	}
}

func TestSemaphoreCountIsIdentity(t *testing.T) {
	l := memLocker(t, memory.NewNamespace())
	ctx := context.Background()
	p, err := newSem(t, l, "k", 2).TryAcquire(ctx)
	require.NoError(t, err)
	_, err = newSem(t, l, "k", 3).TryAcquire(ctx)
	var pe *backend.PermitsError
	if !errors.Is(err, distlock.ErrInvalidOption) || !errors.As(err, &pe) || pe.Have != 2 || pe.Want != 3 {
		t.Fatalf("3 permits on a semaphore held with 2: %v, want a PermitsError{2, 3}", err)
	}
	if _, err := newSem(t, l, "k", 2).Acquire(ctx); err != nil {
		t.Fatalf("second of 2 permits after the refusal: %v", err)
	}
	_ = p.Release(ctx)
	for _, n := range []int{0, -1, backend.MaxPermits + 1} {
		if _, err := l.Semaphore("k", n); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("Semaphore(%d): %v, want ErrInvalidOption", n, err)
		}
	}
	if _, err := l.Semaphore("", 1); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Errorf("Semaphore with empty key: %v", err)
	}
	if _, err := newSem(t, l, "k2", 1).Acquire(ctx, distlock.WithOwner("me")); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("permit WithOwner: %v, want ErrInvalidOption", err)
	}
}

func TestSemaphoreWaitsAndIsWoken(t *testing.T) {
	ns := memory.NewNamespace()
	a, b := memLocker(t, ns), memLocker(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := newSem(t, a, "w", 1).Acquire(ctx, distlock.WithTTL(time.Minute))
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		q, err := newSem(t, b, "w", 1).Acquire(ctx, distlock.WithTTL(time.Minute))
		if err == nil {
			err = q.Release(ctx)
		}
		got <- err
	}()
	require.NoError(t, p.Release(ctx))
	require.NoError(t, <-got, "waiter")
}

func TestSemaphoreCancelLeavesNothing(t *testing.T) {
	l := memLocker(t, memory.NewNamespace())
	ctx := context.Background()
	s := newSem(t, l, "c", 2)
	p1, _ := s.TryAcquire(ctx)
	p2, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = s.Acquire(cctx)
	cancel()
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire past its ctx: %v", err)
	}
	_ = p1.Release(ctx)
	_ = p2.Release(ctx)
	for i := range 2 {
		if _, err := s.TryAcquire(ctx); err != nil {
			t.Fatalf("permit %d after the cancelled wait: %v", i, err)
		}
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("third of 2 permits: %v", err)
	}
}

func TestSemaphoreExpiredPermitReissued(t *testing.T) {
	l := memLocker(t, memory.NewNamespace())
	ctx := context.Background()
	s := newSem(t, l, "e", 1)
	p, err := s.TryAcquire(ctx, distlock.WithTTL(50*time.Millisecond), distlock.WithAutoRefresh(false))
	require.NoError(t, err)
	<-p.Done()
	require.ErrorIs(t, p.Err(), distlock.ErrLockLost, "expired permit")
	q, err := s.Acquire(ctx)
	require.NoError(t, err, "permit after the expiry")
	require.ErrorIs(t, p.Release(ctx), distlock.ErrNotHeld, "stale Release")
	require.NoError(t, q.Err(), "new holder's permit hurt by the stale Release")
	// Auto-refresh keeps a permit past its TTL: the one refresh machinery.
	require.NoError(t, q.Release(ctx))
	r, err := s.Acquire(ctx, distlock.WithTTL(400*time.Millisecond))
	require.NoError(t, err)
	first := r.Deadline()
	for limit := time.Now().Add(10 * time.Second); !r.Deadline().After(first); time.Sleep(10 * time.Millisecond) {
		if r.Err() != nil || time.Now().After(limit) {
			t.Fatalf("permit not refreshed automatically: %v", r.Err())
		}
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("permit of a refreshed holder given out: %v", err)
	}
}

func TestSemaphoreSessionEnd(t *testing.T) {
	ns := memory.NewNamespace()
	crashed, other := memory.MustNew(ns), memLocker(t, ns)
	ctx := context.Background()
	p, err := newSem(t, crashed, "s", 1).TryAcquire(ctx)
	require.NoError(t, err)
	memory.Crash(crashed)
	<-p.Done()
	require.ErrorIs(t, p.Err(), distlock.ErrNotHeld, "permit of a crashed session")
	q, err := newSem(t, other, "s", 1).TryAcquire(ctx)
	require.NoError(t, err, "permit of a crashed session not given back")
	closing := memory.MustNew(ns)
	_ = q.Release(ctx)
	r, err := newSem(t, closing, "s", 1).TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, closing.Close())
	require.ErrorIs(t, r.Err(), distlock.ErrClosed, "permit after Close")
	if _, err := newSem(t, other, "s", 1).TryAcquire(ctx); err != nil {
		t.Fatalf("permit of a closed Locker not given back: %v", err)
	}
	if _, err := closing.Semaphore("s", 1); !errors.Is(err, distlock.ErrClosed) {
		t.Fatalf("Semaphore on a closed Locker: %v", err)
	}
}

func TestSemaphoreRefusedWithoutDriverSupport(t *testing.T) {
	d := newCtlDriver()
	defer d.free()
	l := distlock.New(d, "ctl")
	defer l.Close()
	_, err := l.Semaphore("k", 2)
	require.ErrorIs(t, err, distlock.ErrInvalidOption, "semaphore on a driver without one")
}
