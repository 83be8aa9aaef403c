package memory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func harness(ns *memory.Namespace) conformance.Harness {
	return conformance.Harness{
		Name:      "memory",
		NewLocker: func(context.Context) (*distlock.Locker, error) { return memory.MustNew(ns), nil },
		TTL:       300 * time.Millisecond,
		Faults: conformance.Faults{
			Expire: func(_ context.Context, key string) error {
				if !ns.Expire(key) {
					return fmt.Errorf("key %q not held", key)
				}
				return nil
			},
			KillClient: func(l *distlock.Locker) error {
				memory.Crash(l)
				return nil
			},
		},
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness(memory.NewNamespace()))
}

// TestQueuedSameOwnerNests is issue 14 defect 9: when owner O is handed the
// lock, every acquisition of O already queued behind the previous holder
// nests at once, as an acquisition by O arriving then would.
func TestQueuedSameOwnerNests(t *testing.T) {
	ns := memory.NewNamespace()
	x, a, b := memory.MustNew(ns), memory.MustNew(ns), memory.MustNew(ns)
	defer x.Close()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	held, err := x.TryAcquire(ctx, "k")
	require.NoError(t, err)
	owner := distlock.WithOwner("O")
	type result struct {
		lease *distlock.Lease
		err   error
	}
	results := make(chan result, 3)
	for _, l := range []*distlock.Locker{a, a, b} {
		go func() {
			lease, err := l.Acquire(ctx, "k", owner)
			results <- result{lease, err}
		}()
	}
	// All three are queued behind x.
	waitQueued(t, ns, "k", 3)
	require.NoError(t, held.Release(ctx))
	var leases []*distlock.Lease
	for range 3 {
		select {
		case r := <-results:
			require.NoError(t, r.err, "queued Acquire of the owner")
			leases = append(leases, r.lease)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of 3 queued acquisitions of owner O returned while O holds the lock; the others still wait for their own owner", len(leases))
		}
	}
	for _, l := range leases[1:] {
		assert.Equal(t, leases[0].Token(), l.Token(), "nested token %d, want the holder's %d", l.Token(), leases[0].Token())
	}
	for _, l := range leases {
		assert.NoError(t, l.Release(ctx), "Release")
	}
	free, err := x.TryAcquire(ctx, "k")
	require.NoError(t, err, "after every nested hold was released")
	_ = free.Release(ctx)
}

// waitQueued polls until n acquisitions wait for key (bounded).
func waitQueued(t *testing.T, ns *memory.Namespace, key string, n int) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if memory.Waiters(ns, key) >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("fewer than %d waiters queued on %q after 5s", n, key)
}

// TestNewNilNamespace: New's one error, a nil Namespace, is an
// ErrInvalidOption at construction, not a panic at the first acquisition.
func TestNewNilNamespace(t *testing.T) {
	l, err := memory.New(nil)
	if !errors.Is(err, distlock.ErrInvalidOption) || l != nil {
		t.Fatalf("New(nil) = %v, %v; want ErrInvalidOption", l, err)
	}
}
