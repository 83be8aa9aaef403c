package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
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
	if err != nil {
		t.Fatal(err)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(m.Keys()); got != "[m1 m2]" {
		t.Fatalf("Keys %s, want [m1 m2]", got)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("second Release: %v", err)
	}
}

func TestMultiLeaseEndsWhenAMemberIsLost(t *testing.T) {
	ns := memory.NewNamespace()
	a, op := memLocker(t, ns), memLocker(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := a.AcquireAll(ctx, []string{"x", "y", "z"})
	if err != nil {
		t.Fatal(err)
	}
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
	if err != nil {
		t.Fatalf("members of an ended MultiLease not given back: %v", err)
	}
	if err := m.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("Release after the loss: %v, want ErrLockLost", err)
	}
	if err := n.Err(); err != nil {
		t.Fatalf("the stale Release touched the new holder: %v", err)
	}
}

func TestAcquireAllBadKeys(t *testing.T) {
	l := memLocker(t, memory.NewNamespace())
	for _, keys := range [][]string{nil, {"ok", ""}, {string([]byte{0xff})}} {
		if _, err := l.AcquireAll(context.Background(), keys); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("AcquireAll(%q): %v, want ErrInvalidKey", keys, err)
		}
	}
}
