package redislua

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMinimumHold walks release_after.lua and release_hold's minimum-hold
// branch: a hold released with a minimum hold while another remains keeps
// the lock's later expiry; the last hold's release within the minimum hold
// leaves the lock taken until it ends, cutting its life short and
// publishing the wake-up of the marked lock; a lone hold released with a
// minimum hold does the same at once.
func TestMinimumHold(t *testing.T) {
	c := client(t)
	ctx := t.Context()
	holds := NewHoldSource()
	ps := c.Subscribe(ctx)
	defer ps.Close()
	// woken reports whether a message came on ps before a PING sent now.
	woken := func() bool { t.Helper(); return nextMessage(t, ctx, ps) != "" }
	pttl := func(k Keys) time.Duration { return c.PTTL(ctx, k.Lock).Val() }

	k := KeysFor("t:", "min-hold-nested")
	require.NoError(t, ps.Subscribe(ctx, k.Channel))
	if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil { // the confirmation
		t.Fatal(err)
	}
	h1, h2 := holds.Next(), holds.Next()
	r, err := Acquire(ctx, c, k, "A", h1, "", time.Minute)
	if err != nil || r.Outcome != Acquired {
		t.Fatalf("acquire = %+v, %v", r, err)
	}
	if r, err := Acquire(ctx, c, k, "A", h2, "", time.Minute); err != nil || r.Outcome != Reentered {
		t.Fatalf("nested acquire = %+v, %v", r, err)
	}
	if r, err := Acquire(ctx, c, k, "B", holds.Next(), "", time.Minute); err != nil || r.Outcome != Busy {
		t.Fatalf("B's attempt = %+v, %v; want busy (marks the lock)", r, err)
	}
	if ok, err := ReleaseAfter(ctx, c, k, "A", r.Token, h1, 5*time.Second); err != nil || !ok {
		t.Fatalf("release after of the first hold = %v, %v", ok, err)
	}
	if p := pttl(k); p < 50*time.Second {
		t.Errorf("release after with another hold left shortened the expiry to %v", p)
	}
	assert.False(t, woken(), "release after with another hold left published a wake-up")
	if rr, err := Release(ctx, c, k, "A", r.Token, h2); err != nil || rr != HoldsLeft {
		t.Fatalf("release of the last hold within the minimum hold = %v, %v; want HoldsLeft", rr, err)
	}
	if p := pttl(k); p <= 0 || p > 5*time.Second {
		t.Errorf("lock after its last hold's release within the minimum hold: pttl %v, want ≤ 5s", p)
	}
	assert.True(t, woken(), "the release that cut the lock's life short published no wake-up")
	if r, err := Acquire(ctx, c, k, "B", holds.Next(), "", time.Minute); err != nil || r.Outcome != Busy || r.Holder != "A" {
		t.Errorf("B within the minimum hold = %+v, %v; want busy, held by A", r, err)
	}

	k = KeysFor("t:", "min-hold-lone")
	require.NoError(t, ps.Subscribe(ctx, k.Channel))
	if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	h := holds.Next()
	if r, err = Acquire(ctx, c, k, "A", h, "", time.Minute); err != nil || r.Outcome != Acquired {
		t.Fatalf("acquire = %+v, %v", r, err)
	}
	if r, err := Acquire(ctx, c, k, "B", holds.Next(), "", time.Minute); err != nil || r.Outcome != Busy {
		t.Fatalf("B's attempt = %+v, %v; want busy", r, err)
	}
	if ok, err := ReleaseAfter(ctx, c, k, "A", r.Token, h, 2*time.Second); err != nil || !ok {
		t.Fatalf("release after of the lone hold = %v, %v", ok, err)
	}
	if p := pttl(k); p <= 0 || p > 2*time.Second {
		t.Errorf("lock after release after of its lone hold: pttl %v, want ≤ 2s", p)
	}
	assert.True(t, woken(), "release after that cut the lock's life short published no wake-up")
	if ok, err := ReleaseAfter(ctx, c, k, "A", r.Token, h, 2*time.Second); err != nil || ok {
		t.Errorf("second release after of the same hold = %v, %v; want not held", ok, err)
	}
}
