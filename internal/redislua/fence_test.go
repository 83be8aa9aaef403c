package redislua

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFenceUpgrade: a lock whose per-key counter of the old layout is at
// 1000 gets a token above 1000 from the slot counter, and the old counter
// is gone; a legacy counter below the slot counter is dropped without
// raising it. The same through the fair scripts, and through a fair
// handover (the release grants the lock to a waiter).
func TestFenceUpgrade(t *testing.T) {
	c := client(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	holds := NewHoldSource()

	k := KeysFor("t:", "upgraded")
	c.Set(ctx, k.Legacy, 1000, 0)
	r, err := Acquire(ctx, c, k, "A", holds.Next(), "", time.Minute)
	if err != nil || r.Outcome != Acquired || r.Token <= 1000 {
		t.Fatalf("acquire over a legacy counter at 1000 = %+v, %v; want a token > 1000", r, err)
	}
	assert.Equal(t, int64(0), c.Exists(ctx, k.Legacy).Val(), "legacy counter not deleted")
	if n, _ := c.Get(ctx, k.Fence).Uint64(); n != r.Token {
		t.Errorf("slot counter %d, want the token %d", n, r.Token)
	}

	// Another lock name in the same slot: its tokens continue the shared
	// counter; a lower legacy counter is dropped and does not lower it.
	other := sameSlot(t, "t:", k)
	c.Set(ctx, other.Legacy, 5, 0)
	r2, err := Acquire(ctx, c, other, "B", holds.Next(), "", time.Minute)
	if err != nil || r2.Token != r.Token+1 || c.Exists(ctx, other.Legacy).Val() != 0 {
		t.Errorf("same slot, legacy 5: %+v, %v; want token %d and the legacy counter gone", r2, err, r.Token+1)
	}

	// Fair acquire, then a fair handover, over legacy counters.
	fk := KeysFor("t:", "upgraded/fair").Fair()
	c.Set(ctx, fk.Legacy, 2000, 0)
	hA, hW := holds.Next(), holds.Next()
	if r, err := FairAcquire(ctx, c, fk, "A", time.Minute, FairAttempt{Hold: hA, N: 1}); err != nil || r.Token <= 2000 {
		t.Fatalf("fair acquire over a legacy counter at 2000 = %+v, %v", r, err)
	}
	if _, err := FairAcquire(ctx, c, fk, "W", time.Minute, FairAttempt{Hold: hW, N: 1, Enqueue: true, QueueTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	c.Set(ctx, fk.Legacy, 3000, 0) // as if an old client had taken tokens meanwhile
	if _, err := Release(ctx, c, fk, "A", 0, hA); err != nil {
		t.Fatal(err)
	}
	if s, err := Inspect(ctx, c, fk); err != nil || s.Owner != "W" || s.Token <= 3000 || c.Exists(ctx, fk.Legacy).Val() != 0 {
		t.Errorf("handover over a legacy counter at 3000: %+v, %v", s, err)
	}
}

// sameSlot returns the keys of another lock name whose lock key is in k's
// slot.
func sameSlot(t *testing.T, prefix string, k Keys) Keys {
	t.Helper()
	slot := Slot(k.Lock)
	for i := range 1_000_000 {
		o := KeysFor(prefix, "other/"+strconv.Itoa(i))
		if Slot(o.Lock) == slot && o.Lock != k.Lock {
			require.Equal(t, k.Fence, o.Fence, "same slot, different counters %q and %q", o.Fence, k.Fence)
			return o
		}
	}
	t.Fatal("no other key in the slot")
	return Keys{}
}
