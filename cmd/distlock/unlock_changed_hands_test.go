package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// handOverLocker is a Locker that runs before(n) ahead of its n-th call of
// Inspect or ForceRelease: a way to change the lock's holder, on the real
// in-process backend, exactly between unlock's last Inspect and its
// ForceRelease.
type handOverLocker struct {
	*distlock.Locker
	calls  int
	before func(n int)
}

func (h *handOverLocker) Inspect(ctx context.Context, key string) (distlock.LockInfo, error) {
	h.calls++
	h.before(h.calls)
	return h.Locker.Inspect(ctx, key)
}

func (h *handOverLocker) ForceRelease(ctx context.Context, key string, opts ...distlock.ForceOption) (distlock.LockInfo, error) {
	h.calls++
	h.before(h.calls)
	return h.Locker.ForceRelease(ctx, key, opts...)
}

// TestUnlockEvictsAHolderItNeverShowed: `unlock --force` says "The lock is
// freed only if the holder is still the one shown" and exits 1 "when ...
// the lock changed hands before it was freed". When the holder changes
// after unlock's (re-)inspection and before its ForceRelease, unlock evicts
// the new holder, which the operator never saw nor confirmed, and exits 0
// with a warning. ForceRelease has no compare on the holder shown (owner,
// token), so the promise cannot be kept; both with and without --yes.
func TestUnlockEvictsAHolderItNeverShowed(t *testing.T) {
	for _, yes := range []bool{false, true} {
		t.Run(map[bool]string{false: "confirmed", true: "yes"}[yes], func(t *testing.T) {
			ctx := t.Context()
			ns := memory.NewNamespace()
			a, b, op := memory.MustNew(ns), memory.MustNew(ns), memory.MustNew(ns)
			defer a.Close()
			defer b.Close()
			defer op.Close()
			shown, err := a.Acquire(ctx, "k", distlock.WithMetadata("shown holder"), distlock.WithTTL(time.Minute))
			require.NoError(t, err)
			var next *distlock.Lease
			forceCall := 3 // inspect, re-inspect after the answer, force
			if yes {
				forceCall = 2 // inspect, force
			}
			h := &handOverLocker{Locker: op, before: func(n int) {
				if n != forceCall {
					return
				}
				// The shown holder finishes; another takes the lock.
				assert.NoError(t, shown.Release(ctx))
				if next, err = b.Acquire(ctx, "k", distlock.WithMetadata("never shown"), distlock.WithTTL(time.Minute)); err != nil {
					t.Error(err)
				}
			}}
			saved := confirmIn
			confirmIn = strings.NewReader("y\n")
			defer func() { confirmIn = saved }()
			var stdout, stderr bytes.Buffer
			u := unlocker{locker: h, key: "k", timeout: 10 * time.Second, stdout: &stdout, stderr: &stderr}
			st := u.run(yes)
			if next == nil {
				t.Fatalf("the hand-over did not happen (%d calls): %s %s", h.calls, stdout.String(), stderr.String())
			}
			if next.Err() != nil || st == ExitOK {
				t.Errorf("unlock evicted a holder it never showed: exit %d, new holder's lease %v;\nstdout %q\nstderr %q\nwant exit %d and the new holder intact", st, next.Err(), stdout.String(), stderr.String(), ExitFailed)
			}
		})
	}
}

// TestUnlockAnsweredNo: on a terminal, an answer other than y frees
// nothing and exits 1 (the binary refuses to ask without a terminal, so
// the answer is read here in-process).
func TestUnlockAnsweredNo(t *testing.T) {
	ctx := t.Context()
	ns := memory.NewNamespace()
	a, op := memory.MustNew(ns), memory.MustNew(ns)
	defer a.Close()
	defer op.Close()
	held, err := a.Acquire(ctx, "k", distlock.WithTTL(time.Minute))
	require.NoError(t, err)
	saved := confirmIn
	confirmIn = strings.NewReader("n\n")
	defer func() { confirmIn = saved }()
	var stdout, stderr bytes.Buffer
	u := unlocker{locker: op, key: "k", timeout: 10 * time.Second, stdout: &stdout, stderr: &stderr}
	if st := u.run(false); st != ExitFailed || !strings.Contains(stderr.String(), "not confirmed") || held.Err() != nil {
		t.Errorf("answered n: exit %d, stderr %q, holder's lease %v; want %d, not confirmed, the lease intact", st, stderr.String(), held.Err(), ExitFailed)
	}
}
