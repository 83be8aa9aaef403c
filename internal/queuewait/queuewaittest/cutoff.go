package queuewaittest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// CancelledWhileCutOff: a waiter queued on "k" behind holder's hold has
// its ctx cancelled while its server does not answer (cut(true)). Acquire
// must return the ctx error promptly (Acquire honours ctx), and its entry
// must be deleted once the server answers again (cut(false)).
//
// watches counts the waiter's predecessor watches; left reports how many
// queue entries "k" has on the server.
func CancelledWhileCutOff(t *testing.T, holder, waiter *distlock.Locker, watches func() int64, cut func(on bool), left func(t *testing.T) int) {
	h, err := holder.Acquire(ctx(t, 30*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Release(ctx(t, 10*time.Second)) }()
	w0 := watches()
	wctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(wctx, "k")
		done <- err
	}()
	until(t, 20*time.Second, "waiter watching its predecessor", func() bool { return watches() > w0 })

	cut(true)
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("waiter: %v, want ErrNotAcquired and context.Canceled", err)
		}
		if took, most := time.Since(start), slack.D(500*time.Millisecond); took > most {
			t.Errorf("Acquire returned %v after its ctx was cancelled, want at most %v", took, most)
		}
	case <-time.After(slack.D(30 * time.Second)):
		t.Fatal("Acquire did not return after its ctx was cancelled")
	}
	cut(false)
	until(t, 20*time.Second, "the waiter's entry deleted", func() bool { return left(t) == 1 })
}

// ctx is a context of the test that ends after d.
func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return c
}

// until polls cond every 20ms until it holds, for at most slack.D(d).
func until(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(slack.D(d))
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", slack.D(d), what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
