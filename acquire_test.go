package distlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/stretchr/testify/require"
)

// busyThenClose answers every attempt "busy"; from the second on it runs
// onBusy between the backend's answer and the return, the moment a Close
// racing a waiting Acquire's attempt lands in.
type busyThenClose struct {
	backend.Driver
	calls  atomic.Int32
	onBusy func()
}

func (d *busyThenClose) Capabilities() backend.Capabilities {
	return backend.Capabilities{Expiring: true}
}

func (d *busyThenClose) Close() error { return nil }

func (d *busyThenClose) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	err := backend.Busy(time.Hour)
	if d.calls.Add(1) >= 2 && d.onBusy != nil {
		d.onBusy()
	}
	return nil, err
}

// A Close that lands while a waiting Acquire's attempt is answering "busy"
// ends that Acquire with ErrClosed, as at any other moment of the wait (it
// returned ErrNotAcquired "held by another owner for up to 1h").
func TestCloseDuringWaitingAttempt(t *testing.T) {
	d := &busyThenClose{}
	l := distlock.New(d, "busy")
	d.onBusy = func() { go l.Close(); time.Sleep(50 * time.Millisecond) }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := l.Acquire(ctx, "k", distlock.WithRetry(distlock.Backoff{Min: time.Millisecond, Max: time.Millisecond}))
	require.ErrorIs(t, err, distlock.ErrClosed, "Acquire whose attempt Close raced ended")
}

// busyThenStall answers "busy" once, then holds every attempt until its
// ctx ends, as a backend whose answer is still on the way.
type busyThenStall struct{ busyThenClose }

func (d *busyThenStall) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if d.calls.Add(1) == 1 {
		return nil, backend.Busy(time.Hour)
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// A wait whose ctx ends while an attempt is on the way ends as a busy lock
// (ErrNotAcquired and the ctx error), not as ErrUnavailable: every answer
// the backend gave said "held".
func TestWaitEndsDuringAttemptIsBusy(t *testing.T) {
	l := distlock.New(&busyThenStall{}, "stall")
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := l.Acquire(ctx, "k", distlock.WithRetry(distlock.Backoff{Min: time.Millisecond, Max: time.Millisecond}))
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("Acquire = %v, want ErrNotAcquired and the ctx error, not ErrUnavailable", err)
	}
}

// lateDriver grants after delay, and then stops answering: its releases
// wait for their ctx.
type lateDriver struct {
	*ctlDriver
	delay time.Duration
}

func (d *lateDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	time.Sleep(d.delay)
	l, err := d.ctlDriver.TryAcquire(ctx, req)
	d.hang.Store(true)
	return l, err
}

// TestLateGrantReturnsAtOnce: an acquisition whose grant arrives after its
// validity returns at once; the lock is given back in the background
// (bounded by the release bound), not while the caller waits, even if the
// backend stops answering.
func TestLateGrantReturnsAtOnce(t *testing.T) {
	d := &lateDriver{ctlDriver: newCtlDriver(), delay: 80 * time.Millisecond}
	l := distlock.New(d, "late")
	start := time.Now()
	_, err := l.TryAcquire(context.Background(), "k", distlock.WithTTL(50*time.Millisecond))
	took := time.Since(start)
	require.ErrorIs(t, err, distlock.ErrUnavailable, "late grant")
	if took > 2*time.Second {
		t.Fatalf("late grant returned after %v: the caller waited for the give-back", took)
	}
	waitFor(t, 5*time.Second, "give-back sent", func() bool { return d.stalls.Load() > 0 })
	d.free()
	_ = l.Close()
}
