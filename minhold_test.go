package distlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWithMinHoldChecks(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, distlock.MaxTTL + 1} {
		assert.ErrorIs(t, distlock.CheckOptions(distlock.WithMinHold(d)), distlock.ErrInvalidOption, "WithMinHold(%v)", d)
	}
}

// TestMinHoldKeepsTheLock: a job released before its minimum hold leaves
// the lock taken (another owner's TryAcquire fails) until the minimum hold
// has passed, then free; released after it, the lock is free at once.
func TestMinHoldKeepsTheLock(t *testing.T) {
	ns := memory.NewNamespace()
	a, b := memory.MustNew(ns), memory.MustNew(ns)
	defer a.Close()
	defer b.Close()
	ctx := t.Context()
	const hold = 300 * time.Millisecond
	start := time.Now()
	ran, err := a.TryDo(ctx, "nightly", func(context.Context) error { return nil }, distlock.WithMinHold(hold))
	if !ran || err != nil {
		t.Fatalf("TryDo on a free lock: ran %v, %v", ran, err)
	}
	// A second host whose timer fires a little later skips the job.
	ran, err = b.TryDo(ctx, "nightly", func(context.Context) error { return errors.New("ran twice") })
	if elapsed := time.Since(start); elapsed < hold && (ran || err != nil) {
		t.Errorf("TryDo %v after a job with a %v minimum hold: ran %v, %v; want skipped", elapsed, hold, ran, err)
	}
	info, err := b.Inspect(ctx, "nightly")
	if elapsed := time.Since(start); err != nil || (elapsed < hold && !info.Held) {
		t.Errorf("Inspect %v into the minimum hold: %+v, %v; want held", elapsed, info, err)
	}
	// Poll for the end of the hold (the memory backend hands it back at
	// expiry), never sooner than the minimum.
	deadline := time.Now().Add(10 * time.Second)
	for {
		lease, err := b.TryAcquire(ctx, "nightly")
		if err == nil {
			if elapsed := time.Since(start); elapsed < hold {
				t.Errorf("lock free %v after acquisition, before the %v minimum hold", elapsed, hold)
			}
			lease.Release(ctx)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lock still taken 10s after a 300ms minimum hold")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Past the minimum hold, Release frees at once.
	lease, err := a.TryAcquire(ctx, "nightly", distlock.WithMinHold(time.Millisecond))
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, lease.Release(ctx))
	if l2, err := b.TryAcquire(ctx, "nightly"); err != nil {
		t.Errorf("after a release past the minimum hold: %v, want free", err)
	} else {
		l2.Release(ctx)
	}
}

func TestTryDoReportsWhetherItRan(t *testing.T) {
	ns := memory.NewNamespace()
	a := memory.MustNew(ns)
	defer a.Close()
	ctx := t.Context()
	holder, err := a.TryAcquire(ctx, "k")
	require.NoError(t, err)
	ran, err := a.TryDo(ctx, "k", func(context.Context) error { return nil })
	if ran || err != nil {
		t.Errorf("TryDo on a held lock: ran %v, %v; want false, nil", ran, err)
	}
	holder.Release(ctx)
	boom := errors.New("boom")
	if ran, err := a.TryDo(ctx, "k", func(context.Context) error { return boom }); !ran || !errors.Is(err, boom) {
		t.Errorf("TryDo whose fn fails: ran %v, %v; want true and fn's error", ran, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if ran, err := a.TryDo(cctx, "k", func(context.Context) error { return nil }); ran || !errors.Is(err, context.Canceled) {
		t.Errorf("TryDo with a cancelled ctx: ran %v, %v; want false and context.Canceled", ran, err)
	}
	if ran, err := a.TryDo(ctx, "", func(context.Context) error { return nil }); ran || !errors.Is(err, distlock.ErrInvalidKey) {
		t.Errorf("TryDo with an empty key: ran %v, %v; want ErrInvalidKey", ran, err)
	}
}
