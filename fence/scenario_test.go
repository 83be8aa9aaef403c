package fence_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/memory"
	"github.com/stretchr/testify/require"
)

// takeover is the seeds' scenario on the memory backend: holder A acquires
// and is "paused" (its lock expires while it does nothing: Namespace.Expire,
// which the holder is not told about), B acquires with a higher token. It
// returns both leases.
func takeover(t *testing.T, ctx context.Context) (a, b *distlock.Lease) {
	t.Helper()
	ns := memory.NewNamespace()
	l := memory.MustNew(ns)
	t.Cleanup(func() { _ = l.Close() })
	a, err := l.Acquire(ctx, "res", distlock.WithAutoRefresh(false))
	require.NoError(t, err)
	require.True(t, ns.Expire("res"), "Expire: lock not held")
	b, err = l.Acquire(ctx, "res", distlock.WithAutoRefresh(false))
	require.NoError(t, err)
	if b.Token() <= a.Token() {
		t.Fatalf("tokens: A %d, B %d", a.Token(), b.Token())
	}
	return a, b
}

// TestPausedHolderRefused: A writes, pauses past its lease, B acquires and
// writes, A wakes and writes again: refused with a *StaleError, B's data
// intact; A's increment is refused too. B retrying its write with its token
// is allowed and changes nothing (idempotent).
func TestPausedHolderRefused(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := ctxT(t)
			a, b := takeover(t, ctx)
			require.NoError(t, tg.set(ctx, a.Token(), "A1"), "A's first write (before its pause)")
			require.NoError(t, tg.set(ctx, b.Token(), "B"), "B's write")
			require.NoError(t, tg.incr(ctx, b.Token()), "B's increment")
			err := tg.set(ctx, a.Token(), "A2")
			var se *fence.StaleError
			if !errors.Is(err, fence.ErrStale) || !errors.As(err, &se) {
				t.Fatalf("A's write after B's: %v, want ErrStale", err)
			}
			if se.Token != a.Token() || se.Highest != b.Token() {
				t.Errorf("StaleError %+v: want token %d, highest %d", se, a.Token(), b.Token())
			}
			require.ErrorIs(t, tg.incr(ctx, a.Token()), fence.ErrStale, "A's increment after B's")
			if v, err := tg.get(ctx); err != nil || v != "B" {
				t.Fatalf("value %q, %v: want B's", v, err)
			}
			// B's retry: same token, same write.
			for range 2 {
				require.NoError(t, tg.set(ctx, b.Token(), "B"), "B's retry")
			}
			if v, err := tg.get(ctx); err != nil || v != "B" {
				t.Fatalf("value after B's retries %q, %v", v, err)
			}
			n, toks, err := tg.state(ctx)
			if err != nil || n != 1 || len(toks) != 1 || toks[0] != b.Token() {
				t.Fatalf("counter %d, log %v, %v: want 1, [%d]", n, toks, err, b.Token())
			}
		})
	}
}

// TestZeroTokenRefused: a lease from a backend without fencing carries
// token 0; every guard refuses it with ErrZeroToken and writes nothing.
func TestZeroTokenRefused(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := ctxT(t)
			require.ErrorIs(t, tg.set(ctx, 0, "zero"), fence.ErrZeroToken, "set with token 0")
			require.ErrorIs(t, tg.incr(ctx, 0), fence.ErrZeroToken, "incr with token 0")
			if v, err := tg.get(ctx); err != nil || v != "" {
				t.Fatalf("value %q, %v: want nothing written", v, err)
			}
			if n, toks, err := tg.state(ctx); err != nil || n != 0 || len(toks) != 0 {
				t.Fatalf("counter %d, log %v, %v: want nothing written", n, toks, err)
			}
		})
	}
}

// TestConcurrentHoldersNoLostUpdate: holders contend for one lock and
// increment a counter behind the guard; some are "paused" after acquiring
// (their lock expires under them and a rival takes it) and write late. The
// counter ends exactly at the number of increments that returned nil, the
// log of written tokens never goes down, and every failure is ErrStale.
func TestConcurrentHoldersNoLostUpdate(t *testing.T) {
	const (
		holders = 4
		rounds  = 12 // per holder
	)
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctxT(t), time.Minute)
			defer cancel()
			ns := memory.NewNamespace()
			l := memory.MustNew(ns)
			defer l.Close()
			var ok, stale atomic.Int64
			var wg sync.WaitGroup
			for range holders {
				wg.Go(func() {
					for i := 0; i < rounds && ctx.Err() == nil; i++ {
						lease, err := l.Acquire(ctx, "counter", distlock.WithAutoRefresh(false))
						if err != nil {
							t.Error(err)
							return
						}
						if rand.IntN(3) == 0 { // paused past the lease
							ns.Expire("counter")
							time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
						}
						switch err := tg.incr(ctx, lease.Token()); {
						case err == nil:
							ok.Add(1)
						case errors.Is(err, fence.ErrStale):
							stale.Add(1)
						default:
							t.Errorf("increment with token %d: %v", lease.Token(), err)
						}
						_ = lease.Release(ctx) // ErrNotHeld after a pause
					}
				})
			}
			wg.Wait()
			n, toks, err := tg.state(ctx)
			require.NoError(t, err)
			t.Logf("%d increments, %d refused as stale", ok.Load(), stale.Load())
			if n != ok.Load() || int64(len(toks)) != n {
				t.Fatalf("counter %d, %d logged, %d increments succeeded", n, len(toks), ok.Load())
			}
			for i := 1; i < len(toks); i++ {
				if toks[i] < toks[i-1] {
					t.Fatalf("token %d written after %d: %v", toks[i], toks[i-1], toks)
				}
			}
		})
	}
}
