package redislua

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/stretchr/testify/assert"
)

// TestNameAndMetadataStored: a new lock stores its plain name (so an
// operator who scans the keyspace can tell what a hashed key locks) and
// its metadata, none when empty; a nested hold keeps the first hold's
// metadata; the releases count the holds right with the new fields.
func TestNameAndMetadataStored(t *testing.T) {
	c := client(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	holds := NewHoldSource()
	k := KeysFor("t:", "orders/42 ✓")

	h1, h2 := holds.Next(), holds.Next()
	if r, err := Acquire(ctx, c, k, "A", h1, "pid=1", time.Minute); err != nil || r.Outcome != Acquired {
		t.Fatalf("acquire: %+v %v", r, err)
	}
	if r, err := Acquire(ctx, c, k, "A", h2, "pid=2", time.Minute); err != nil || r.Outcome != Reentered {
		t.Fatalf("nested acquire: %+v %v", r, err)
	}
	// The operator's view: SCAN, then one read of the key.
	keys, _, err := c.Scan(ctx, 0, "t:*", 100).Result()
	if err != nil || !slices.Contains(keys, k.Lock) {
		t.Fatalf("SCAN t:* = %v, %v", keys, err)
	}
	f := c.HGetAll(ctx, k.Lock).Val()
	if f["name"] != "orders/42 ✓" || f["meta"] != "pid=1" || f["o"] != "A" {
		t.Errorf("lock hash %v: want name, the first hold's metadata and owner", f)
	}
	s, err := Inspect(ctx, c, k)
	if err != nil || !s.Held || s.Owner != "A" || s.Name != "orders/42 ✓" || s.Metadata != "pid=1" || len(s.Holds) != 2 || s.Token != 1 || s.PTTL <= 0 || s.PTTL > time.Minute || s.Waiters != -1 {
		t.Errorf("Inspect = %+v, %v", s, err)
	}
	if r, err := Release(ctx, c, k, "A", 0, h1); err != nil || r != HoldsLeft {
		t.Fatalf("release of one of two holds (with metadata) = %v, %v; want HoldsLeft", r, err)
	}
	if r, err := Release(ctx, c, k, "A", 0, h2); err != nil || r != Freed {
		t.Fatalf("release of the last hold = %v, %v; want Freed", r, err)
	}

	// Without metadata: no field, and the holds still count right.
	h3, h4 := holds.Next(), holds.Next()
	for _, h := range []string{h3, h4} {
		if _, err := Acquire(ctx, c, k, "B", h, "", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if f := c.HGetAll(ctx, k.Lock).Val(); f["name"] != "orders/42 ✓" || len(f) != 5 {
		t.Errorf("lock hash without metadata %v: want o, t, name and two holds", f)
	}
	if r, _ := Release(ctx, c, k, "B", 0, h3); r != HoldsLeft {
		t.Fatalf("release of one of two holds = %v, want HoldsLeft", r)
	}
	if r, _ := Release(ctx, c, k, "B", 0, h4); r != Freed {
		t.Fatalf("release of the last hold = %v, want Freed", r)
	}

	// A lock written before names were stored (o, t and holds only) is
	// still released hold by hold.
	h5, h6 := holds.Next(), holds.Next()
	c.HSet(ctx, k.Lock, "o", "C", "t", 7, h5, 1, h6, 1)
	if r, _ := Release(ctx, c, k, "C", 0, h5); r != HoldsLeft {
		t.Fatalf("old-layout lock: release of one of two holds = %v, want HoldsLeft", r)
	}
	if r, _ := Release(ctx, c, k, "C", 0, h6); r != Freed {
		t.Fatalf("old-layout lock: release of the last hold = %v, want Freed", r)
	}
}

// TestFairMetadata: a waiter granted a fair lock by a release gets its own
// metadata and the lock's name stored with it.
func TestFairMetadata(t *testing.T) {
	c := client(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	holds := NewHoldSource()
	k := KeysFor("t:", "fair/md").Fair()
	hA, hB := holds.Next(), holds.Next()
	if r, err := FairAcquire(ctx, c, k, "A", time.Minute, FairAttempt{Hold: hA, N: 1, Metadata: "a"}); err != nil || r.Outcome != Acquired {
		t.Fatalf("A: %+v %v", r, err)
	}
	if r, err := FairAcquire(ctx, c, k, "B waits", time.Minute, FairAttempt{Hold: hB, N: 1, Enqueue: true, QueueTTL: time.Minute, Metadata: "b meta"}); err != nil || r.Outcome != Busy {
		t.Fatalf("B: %+v %v", r, err)
	}
	if s, err := Inspect(ctx, c, k); err != nil || s.Owner != "A" || s.Metadata != "a" || s.Waiters != 1 {
		t.Errorf("Inspect with one waiter = %+v, %v", s, err)
	}
	if r, err := Release(ctx, c, k, "A", 0, hA); err != nil || r != Freed {
		t.Fatalf("release: %v %v", r, err)
	}
	s, err := Inspect(ctx, c, k)
	if err != nil || s.Owner != "B waits" || s.Metadata != "b meta" || s.Name != "fair/md" || !slices.Equal(s.Holds, []string{hB}) || s.Waiters != 0 {
		t.Errorf("Inspect after the handover = %+v, %v", s, err)
	}
}

// TestForceRelease: the script deletes the lock whatever its owner and
// holds, reports it, publishes the wake-up, and a free key is left as it
// is; on a fair lock it grants the lock to the first waiter with a higher
// token.
func TestForceRelease(t *testing.T) {
	c := client(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	holds := NewHoldSource()
	k := KeysFor("t:", "force")
	if s, err := ForceRelease(ctx, c, k, backend.Holder{}); err != nil || s.Held {
		t.Fatalf("ForceRelease of a free key = %+v, %v", s, err)
	}
	h1, h2 := holds.Next(), holds.Next()
	for _, h := range []string{h1, h2} {
		if _, err := Acquire(ctx, c, k, "A", h, "m", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	sub := c.Subscribe(ctx, k.Channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := ForceRelease(ctx, c, k, backend.Holder{})
	if err != nil || !s.Held || s.Owner != "A" || s.Token != 1 || len(s.Holds) != 2 || s.Metadata != "m" {
		t.Fatalf("ForceRelease = %+v, %v", s, err)
	}
	if msg, err := sub.ReceiveMessage(ctx); err != nil || msg.Payload != "1" {
		t.Errorf("wake-up after the forced release: %v, %v", msg, err)
	}
	assert.Equal(t, int64(0), c.Exists(ctx, k.Lock).Val(), "lock still there after ForceRelease")
	if r, _ := Release(ctx, c, k, "A", 1, h1); r != NotHeld {
		t.Errorf("the evicted holder's release = %v, want NotHeld", r)
	}
	if r, _ := Acquire(ctx, c, k, "B", holds.Next(), "", time.Minute); r.Outcome != Acquired || r.Token != 2 {
		t.Errorf("next acquire = %+v, want token 2", r)
	}

	fk := KeysFor("t:", "force/fair").Fair()
	hA, hW := holds.Next(), holds.Next()
	if r, _ := FairAcquire(ctx, c, fk, "A", time.Minute, FairAttempt{Hold: hA, N: 1}); r.Outcome != Acquired {
		t.Fatalf("A: %+v", r)
	}
	if r, _ := FairAcquire(ctx, c, fk, "W", time.Minute, FairAttempt{Hold: hW, N: 1, Enqueue: true, QueueTTL: time.Minute, Metadata: "w"}); r.Outcome != Busy {
		t.Fatalf("W: %+v", r)
	}
	s, err = ForceRelease(ctx, c, fk, backend.Holder{})
	if err != nil || s.Owner != "A" || s.Waiters != 1 {
		t.Fatalf("fair ForceRelease = %+v, %v", s, err)
	}
	if n, err := Inspect(ctx, c, fk); err != nil || n.Owner != "W" || n.Metadata != "w" || n.Token <= s.Token || n.Waiters != 0 {
		t.Errorf("after a forced release the first waiter holds the lock with a higher token: %+v, %v", n, err)
	}
}
