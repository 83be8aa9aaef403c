package redislua

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRefreshReply: refresh.lua's reply is the lock's remaining ms after
// the refresh, max(pttl, ttl), whichever way the server decides it (PEXPIRE
// GT, then PTTL): an extension returns ttl, a later expiry is kept and
// returned, a lock without expiry gets ttl, and a lock not held is left as
// it is (0).
func TestRefreshReply(t *testing.T) {
	c := client(t)
	ctx := t.Context()
	holds := NewHoldSource()
	k := KeysFor("t:", "refresh-reply")
	h := holds.Next()
	r, err := Acquire(ctx, c, k, "A", h, "", 10*time.Second)
	if err != nil || r.Outcome != Acquired {
		t.Fatalf("acquire = %+v, %v", r, err)
	}
	refresh := func(ttl time.Duration) int64 {
		t.Helper()
		call, err := refreshCall(k, "A", r.Token, h, ttl)
		if err != nil {
			t.Fatal(err)
		}
		n, err := refreshScript.Run(ctx, c, call.keys, call.args...).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	pttl := func() time.Duration { return c.PTTL(ctx, k.Lock).Val() }

	if n := refresh(time.Minute); n != 60000 {
		t.Errorf("extending refresh = %d, want 60000", n)
	}
	if p := pttl(); p < 50*time.Second || p > time.Minute {
		t.Errorf("after extending to 1m: pttl %v", p)
	}
	if n := refresh(time.Second); n < 50000 || n > 60000 {
		t.Errorf("refresh to 1s below a 1m expiry = %d, want the remaining ~60000", n)
	}
	if p := pttl(); p < 50*time.Second {
		t.Errorf("refresh to 1s shortened the expiry to %v", p)
	}
	require.NoError(t, c.Persist(ctx, k.Lock).Err())
	if n := refresh(30 * time.Second); n != 30000 {
		t.Errorf("refresh of a lock without expiry = %d, want 30000", n)
	}
	if p := pttl(); p < 20*time.Second || p > 30*time.Second {
		t.Errorf("lock without expiry after a 30s refresh: pttl %v", p)
	}
	call, _ := refreshCall(k, "B", r.Token, h, time.Hour)
	if n, err := refreshScript.Run(ctx, c, call.keys, call.args...).Int64(); err != nil || n != 0 {
		t.Errorf("refresh by another owner = %d, %v; want 0", n, err)
	}
	if p := pttl(); p > 30*time.Second {
		t.Errorf("refresh by another owner changed the expiry to %v", p)
	}
}

// TestReentrantExpiry: a nested acquisition extends the lock's expiry to at
// least its TTL and never shortens it; a lock without expiry gets the TTL.
func TestReentrantExpiry(t *testing.T) {
	c := client(t)
	ctx := t.Context()
	holds := NewHoldSource()
	k := KeysFor("t:", "reentrant-expiry")
	if r, err := Acquire(ctx, c, k, "A", holds.Next(), "", 10*time.Second); err != nil || r.Outcome != Acquired {
		t.Fatalf("acquire = %+v, %v", r, err)
	}
	pttl := func() time.Duration { return c.PTTL(ctx, k.Lock).Val() }
	nest := func(ttl time.Duration) {
		t.Helper()
		if r, err := Acquire(ctx, c, k, "A", holds.Next(), "", ttl); err != nil || r.Outcome != Reentered {
			t.Fatalf("nested acquire = %+v, %v", r, err)
		}
	}
	nest(time.Minute)
	if p := pttl(); p < 50*time.Second || p > time.Minute {
		t.Errorf("nested with 1m over a 10s lock: pttl %v, want ~1m", p)
	}
	nest(time.Second)
	if p := pttl(); p < 50*time.Second {
		t.Errorf("nested with 1s shortened the expiry to %v", p)
	}
	require.NoError(t, c.Persist(ctx, k.Lock).Err())
	nest(30 * time.Second)
	if p := pttl(); p < 20*time.Second || p > 30*time.Second {
		t.Errorf("nested with 30s into a lock without expiry: pttl %v, want ~30s", p)
	}
}
