package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAcquireAllOverlappingSetsNeverDeadlockOrOverlap(t *testing.T) {
	ns := memory.NewNamespace()
	keys := []string{"a", "b", "c", "d", "e"}
	var inside [5]atomic.Int32
	var overlaps atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 6 {
		l := memLocker(t, ns)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				// Overlapping sets given in varying orders.
				set := []string{keys[(g+i)%5], keys[(g+2*i+1)%5], keys[(4*g+i+3)%5]}
				m, err := l.AcquireAll(ctx, set)
				if err != nil {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
				for _, k := range m.Keys() {
					if inside[k[0]-'a'].Add(1) > 1 {
						overlaps.Add(1)
					}
				}
				for _, k := range m.Keys() {
					inside[k[0]-'a'].Add(-1)
				}
				if err := m.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("%d overlapping holds", n)
	}
}

func TestAcquireAllGivesBackOnCtxEnd(t *testing.T) {
	ns := memory.NewNamespace()
	a, b := memLocker(t, ns), memLocker(t, ns)
	ctx := context.Background()
	held, err := b.TryAcquire(ctx, "m2")
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = a.AcquireAll(cctx, []string{"m3", "m1", "m2"})
	cancel()
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireAll past its ctx: %v", err)
	}
	for _, k := range []string{"m1", "m3"} {
		info, err := b.Inspect(ctx, k)
		if err != nil || info.Held {
			t.Fatalf("%s left behind after the failed AcquireAll: %+v %v", k, info, err)
		}
	}
	if _, err := a.TryAcquireAll(ctx, []string{"m1", "m2"}); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquireAll with m2 held: %v", err)
	}
	if info, _ := b.Inspect(ctx, "m1"); info.Held {
		t.Fatalf("m1 left behind by TryAcquireAll")
	}
	_ = held.Release(ctx)
	m, err := a.TryAcquireAll(ctx, []string{"m2", "m1", "m2"})
	require.NoError(t, err)
	if got := fmt.Sprint(m.Keys()); got != "[m1 m2]" {
		t.Fatalf("Keys %s, want [m1 m2]", got)
	}
	require.NoError(t, m.Release(ctx))
	require.ErrorIs(t, m.Release(ctx), distlock.ErrNotHeld, "second Release")
}

func TestMultiLeaseEndsWhenAMemberIsLost(t *testing.T) {
	ns := memory.NewNamespace()
	a, op := memLocker(t, ns), memLocker(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := a.AcquireAll(ctx, []string{"x", "y", "z"})
	require.NoError(t, err)
	if _, err := op.ForceRelease(ctx, "y"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Done():
	case <-ctx.Done():
		t.Fatal("MultiLease still held after a member was lost")
	}
	if !errors.Is(m.Err(), distlock.ErrLockLost) || !errors.Is(context.Cause(m.Context()), distlock.ErrLockLost) {
		t.Fatalf("Err %v, cause %v: want ErrLockLost", m.Err(), context.Cause(m.Context()))
	}
	// The other members are given back: another owner takes all three.
	n, err := op.AcquireAll(ctx, []string{"x", "y", "z"})
	require.NoError(t, err, "members of an ended MultiLease not given back")
	require.ErrorIs(t, m.Release(ctx), distlock.ErrLockLost, "Release after the loss")
	require.NoError(t, n.Err(), "the stale Release touched the new holder")
}

func TestAcquireAllBadKeys(t *testing.T) {
	l := memLocker(t, memory.NewNamespace())
	for _, keys := range [][]string{nil, {"ok", ""}, {string([]byte{0xff})}} {
		if _, err := l.AcquireAll(context.Background(), keys); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("AcquireAll(%q): %v, want ErrInvalidKey", keys, err)
		}
	}
}

// A failed AcquireAll or TryAcquireAll holds nothing, also with
// WithMinHold: its rollback gave the members it had taken back through
// Lease.Release, which within a minimum hold keeps the lock, so "all or
// nothing" left a partial hold for the whole minimum hold.

func TestTryAcquireAllFailedKeepsNoMinHold(t *testing.T) {
	ns := memory.NewNamespace()
	a, b := memLocker(t, ns), memLocker(t, ns)
	ctx := t.Context()
	held, err := b.TryAcquire(ctx, "mh-b")
	require.NoError(t, err)
	defer held.Release(ctx)
	if _, err := a.TryAcquireAll(ctx, []string{"mh-a", "mh-b"}, distlock.WithMinHold(time.Minute)); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquireAll with mh-b held: %v, want ErrNotAcquired", err)
	}
	if info, err := b.Inspect(ctx, "mh-a"); err != nil || info.Held {
		t.Fatalf("mh-a after the failed TryAcquireAll: %+v, %v; want free (all or nothing, no minimum hold)", info, err)
	}
}

func TestAcquireAllCtxEndKeepsNoMinHold(t *testing.T) {
	ns := memory.NewNamespace()
	a, b := memLocker(t, ns), memLocker(t, ns)
	ctx := t.Context()
	held, err := b.TryAcquire(ctx, "mh-b")
	require.NoError(t, err)
	defer held.Release(ctx)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := a.AcquireAll(cctx, []string{"mh-a", "mh-b"}, distlock.WithMinHold(time.Minute)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireAll past its ctx: %v, want DeadlineExceeded", err)
	}
	if info, err := b.Inspect(ctx, "mh-a"); err != nil || info.Held {
		t.Fatalf("mh-a after the failed AcquireAll: %+v, %v; want free (all or nothing, no minimum hold)", info, err)
	}
}

// TestAcquireAllOneShotRollbackKeepsNoMinHold: the one-request path
// (backend.MultiAcquirer) undoes an answer it cannot use through the same
// rollback: a driver that answers with fewer locks than asked for left the
// first key held for the minimum hold, so the one-by-one path that follows
// found it taken and TryAcquireAll failed against its own leftover.
func TestAcquireAllOneShotRollbackKeepsNoMinHold(t *testing.T) {
	open, err := backend.Lookup("mem")
	require.NoError(t, err)
	u, _ := url.Parse("mem://oneshot-rollback")
	drv, err := open(t.Context(), u)
	require.NoError(t, err)
	l := distlock.New(shortMulti{drv}, "mem")
	t.Cleanup(func() { _ = l.Close() })
	m, err := l.TryAcquireAll(t.Context(), []string{"os-a", "os-b"}, distlock.WithMinHold(time.Minute))
	require.NoError(t, err, "TryAcquireAll after the one-shot attempt was undone: %v; want both held (nothing left over)", err)
	_ = m.Release(t.Context())
}

// shortMulti is a driver whose one-request acquisition answers with the
// first lock only.
type shortMulti struct{ backend.Driver }

func (d shortMulti) TryAcquireAll(ctx context.Context, reqs []backend.Request) ([]backend.Lock, error) {
	lock, err := d.TryAcquire(ctx, reqs[0])
	if err != nil {
		return nil, err
	}
	return []backend.Lock{lock}, nil
}

// lostWhileWaiting is an Observer that reports the grant of one key.
type lostWhileWaiting struct {
	distlock.NopObserver
	key     string
	granted chan struct{}
}

func (o *lostWhileWaiting) AcquireEnd(_ context.Context, r distlock.AcquireResult) {
	if r.Key == o.key && r.Err == nil {
		close(o.granted)
	}
}

// TestAcquireAllMemberLostWhileWaitingHoldsNothing: the first key is lost
// (released by force) while AcquireAll waits for the second. It returned a
// MultiLease already ended, whose other member was then given back through
// Lease.Release and so kept for the whole minimum hold: a set never held
// whole left a key taken. Now AcquireAll fails with the loss and holds
// nothing.
func TestAcquireAllMemberLostWhileWaitingHoldsNothing(t *testing.T) {
	ns := memory.NewNamespace()
	a, b := memLocker(t, ns), memLocker(t, ns)
	ctx := t.Context()
	blocker, err := b.TryAcquire(ctx, "lw-b")
	require.NoError(t, err)
	obs := &lostWhileWaiting{key: "lw-a", granted: make(chan struct{})}
	type result struct {
		m   *distlock.MultiLease
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, err := a.AcquireAll(ctx, []string{"lw-a", "lw-b"}, distlock.WithMinHold(time.Minute), distlock.WithObserver(obs))
		done <- result{m, err}
	}()
	<-obs.granted // lw-a taken; AcquireAll now waits for lw-b
	if _, err := b.ForceRelease(ctx, "lw-a"); err != nil {
		t.Fatal(err)
	}
	require.NoError(t, blocker.Release(ctx))
	r := <-done
	if r.err == nil {
		_ = r.m.Release(ctx)
		t.Fatalf("AcquireAll returned a set whose first member was lost while it waited (Err %v)", r.m.Err())
	}
	assert.ErrorIs(t, r.err, distlock.ErrLockLost, "AcquireAll")
	if info, err := b.Inspect(ctx, "lw-b"); err != nil || info.Held {
		t.Fatalf("lw-b after AcquireAll failed: %+v, %v; want free (all or nothing, no minimum hold)", info, err)
	}
}
