package etcd

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/queuewait/queuewaittest"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestWaiterCancelledWhileCutOffReturnsPromptly: a queued waiter cancelled
// while the cluster does not answer returns promptly and its waiter key
// goes once the cluster answers (queuewaittest.CancelledWhileCutOff).
func TestWaiterCancelledWhileCutOffReturnsPromptly(t *testing.T) {
	t.Parallel()
	needControl(t)
	c := cluster(t)
	prefix := uniquePrefix(t)
	link, err := netfault.ListenGroup(c.Addrs()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	holder := dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix))
	waiter := dialT(t, link.Addrs(), WithSessionTTL(10*time.Second), WithPrefix(prefix))
	admin := adminClient(t, c.Addrs()...)
	queuewaittest.CancelledWhileCutOff(t, holder, waiter, driverOf(waiter).stats.watches.Load,
		func(on bool) {
			if on {
				link.Blackhole()
			} else {
				link.Heal()
			}
		},
		func(t *testing.T) int {
			keys, err := waiterKeys(ctxT(t, 5*time.Second), admin, prefix)
			if err != nil {
				t.Fatal(err)
			}
			return len(keys)
		})
}

// beforeWatchRun runs a waiter behind a holder on a Locker whose
// beforeWatch hook is hook (called on the first watch only, with the
// predecessor's key), and returns the waiter's outcome; ctx is the
// waiter's. The holder's lease is released at the end of the test.
func beforeWatchRun(t *testing.T, ctx context.Context, hook func(pred string)) (prefix string, err error) {
	t.Helper()
	c := cluster(t)
	prefix = uniquePrefix(t)
	var once sync.Once
	hooks := &testHooks{beforeWatch: func(pred string, _ int64) { once.Do(func() { hook(pred) }) }}
	holder := dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix))
	waiter := dialT(t, c.Addrs(), WithSessionTTL(testTTL), WithPrefix(prefix), withHooks(hooks))
	h, err := holder.Acquire(ctxT(t, 30*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Release(context.Background()) })
	done := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "k")
		if err == nil {
			err = l.Release(ctxT(t, 10*time.Second))
		}
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(slack.D(20 * time.Second)):
		t.Fatal("the waiter's Acquire did not return")
	}
	return prefix, err
}

// TestPredecessorDeletedBeforeWatch: the predecessor is deleted (here by
// an operator) after the waiter read it and before its watch starts: the
// watch, from the revision after the read, still sees the deletion and the
// waiter is granted.
func TestPredecessorDeletedBeforeWatch(t *testing.T) {
	t.Parallel()
	admin := adminClient(t, cluster(t).Addrs()...)
	prefix, err := beforeWatchRun(t, ctxT(t, slack.D(15*time.Second)), func(pred string) {
		if _, err := admin.Delete(ctxT(t, 5*time.Second), pred); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatalf("waiter whose predecessor was deleted before its watch: %v", err)
	}
	keys, err := waiterKeys(ctxT(t, 5*time.Second), admin, prefix)
	if err != nil || len(keys) != 0 {
		t.Errorf("keys left: %v (%v), want none", keys, err)
	}
}

// TestCancelledBeforeWatch: the waiter's ctx ends after it read its
// predecessor and before its watch starts: Acquire returns the ctx error
// and its waiter key is deleted.
func TestCancelledBeforeWatch(t *testing.T) {
	t.Parallel()
	admin := adminClient(t, cluster(t).Addrs()...)
	ctx, cancel := context.WithCancel(ctxT(t, slack.D(15*time.Second)))
	defer cancel()
	prefix, err := beforeWatchRun(t, ctx, func(string) { cancel() })
	if !errors.Is(err, context.Canceled) || !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("waiter cancelled before its watch: %v, want ErrNotAcquired and context.Canceled", err)
	}
	waitFor(t, slack.D(10*time.Second), "only the holder's key left", func() bool {
		keys, err := waiterKeys(ctxT(t, 5*time.Second), admin, prefix)
		return err == nil && len(keys) == 1
	})
}

// TestMixedOwnersAllGranted: waiters of three owners on one Locker,
// joining each other's holds out of the queue (queuewaittest).
func TestMixedOwnersAllGranted(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	prefix := uniquePrefix(t)
	admin := adminClient(t, c.Addrs()...)
	queuewaittest.MixedOwnersAllGranted(t, 60, 3,
		func(t *testing.T) *distlock.Locker {
			return dialT(t, c.Addrs(), WithSessionTTL(30*time.Second), WithPrefix(prefix))
		},
		func(t *testing.T) int {
			keys, err := waiterKeys(ctxT(t, 5*time.Second), admin, prefix)
			if err != nil {
				t.Fatal(err)
			}
			return len(keys)
		})
}
