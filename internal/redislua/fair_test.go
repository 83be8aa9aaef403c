package redislua

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestFairQueue walks the fair scripts against one server: arrival order,
// direct grants published with the attempt they refer to, dead entries
// skipped, leaving waiters, try-only attempts that leave nothing, and
// reentrancy bypassing the queue.
func TestFairQueue(t *testing.T) {
	c := client(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	holds := NewHoldSource()
	k := KeysFor("t:", "fair").Fair()
	ps := c.Subscribe(ctx, k.Channel)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		m, err := ps.ReceiveTimeout(ctx, 5*time.Second)
		require.NoError(t, err, "no message")
		return m.(*goredis.Message).Payload
	}
	attempt := func(owner, hold string, n uint64, enqueue bool, qttl time.Duration) AcquireResult {
		t.Helper()
		r, err := FairAcquire(ctx, c, k, owner, time.Minute, FairAttempt{Hold: hold, N: n, Enqueue: enqueue, QueueTTL: qttl})
		require.NoError(t, err)
		return r
	}

	hA := holds.Next()
	if r := attempt("A", hA, 1, true, time.Minute); r.Outcome != Acquired || r.Token != 1 {
		t.Fatalf("free lock, empty queue: %+v", r)
	}
	if n := c.Exists(ctx, k.Queue).Val(); n != 0 {
		t.Fatalf("uncontended acquire left a queue")
	}
	// Reentrancy bypasses the queue.
	if r := attempt("A", holds.Next(), 1, true, time.Minute); r.Outcome != Reentered || r.Token != 1 {
		t.Fatalf("reentrant: %+v", r)
	}
	// B, C, D queue in that order; D only tries (leaves nothing).
	hB, hC, hD := holds.Next(), holds.Next(), holds.Next()
	if r := attempt("B", hB, 1, true, time.Minute); r.Outcome != Busy || r.Holder != "A" || r.PTTL <= 0 {
		t.Fatalf("B: %+v", r)
	}
	attempt("C", hC, 1, true, time.Minute)
	attempt("B", hB, 2, true, time.Minute) // a renewal keeps B's place
	if r := attempt("D", hD, 1, false, time.Minute); r.Outcome != Busy {
		t.Fatalf("D: %+v", r)
	}
	if q := c.ZRange(ctx, k.Queue, 0, -1).Val(); len(q) != 2 || q[0] != hB || q[1] != hC {
		t.Fatalf("queue %v, want [B C]", q)
	}
	e := c.HGet(ctx, k.Waiters, hB).Val()
	if f := strings.SplitN(e, " ", 6); len(f) != 6 || f[2] != "2" || f[3] != "60000" || f[4] != "1" || f[5] != "B" {
		t.Fatalf("B's entry %q", e)
	}

	// A releases both holds: the second frees it and grants it to B.
	held, _ := c.HKeys(ctx, k.Lock).Result()
	for _, h := range held {
		if h[0] == 'h' {
			if _, err := Release(ctx, c, k, "A", 0, h); err != nil {
				t.Fatal(err)
			}
		}
	}
	g, ok := ParseGrant(next())
	if !ok || g.Hold != hB || g.Token != 2 || g.Attempt != 2 || g.Elapsed <= 0 || g.Elapsed > time.Minute {
		t.Fatalf("grant %+v (%v), want B, token 2, attempt 2", g, ok)
	}
	if o := c.HGet(ctx, k.Lock, "o").Val(); o != "B" {
		t.Fatalf("lock owner %q after the grant, want B", o)
	}
	// B's next attempt (had it missed the message) finds the grant.
	if r := attempt("B", hB, 3, true, time.Minute); r.Outcome != Granted || r.Token != 2 || r.PTTL <= 50*time.Second {
		t.Fatalf("B after the grant: %+v", r)
	}
	// A newcomer cannot barge while C waits, even when B releases:
	// the lock goes to C.
	if r := attempt("E", holds.Next(), 1, false, time.Minute); r.Outcome != Busy {
		t.Fatalf("E barged: %+v", r)
	}
	if r, err := Release(ctx, c, k, "B", 2, hB); err != nil || r != Freed {
		t.Fatalf("B release: %v %v", r, err)
	}
	if g, _ := ParseGrant(next()); g.Hold != hC || g.Token != 3 {
		t.Fatalf("grant %+v, want C token 3", g)
	}
	// C releases with no one queued: a plain wake-up.
	if r, _ := Release(ctx, c, k, "C", 3, hC); r != Freed {
		t.Fatalf("C release: %v", r)
	}
	if m := next(); m != "3" {
		t.Fatalf("message %q, want the plain wake-up \"3\"", m)
	}

	// Dead entries are skipped: F's entry lives 50ms, G's a minute.
	hH := holds.Next()
	attempt("H", hH, 1, true, time.Minute)
	hF, hG := holds.Next(), holds.Next()
	attempt("F", hF, 1, true, 50*time.Millisecond)
	attempt("G", hG, 1, true, time.Minute)
	entryDead(t, c, k, hF)
	if r, _ := Release(ctx, c, k, "H", 0, hH); r != Freed {
		t.Fatalf("H release: %v", r)
	}
	if g, _ := ParseGrant(next()); g.Hold != hG {
		t.Fatalf("grant to %q, want G (F's entry is dead)", g.Hold)
	}
	// A waiter that leaves (Release of its hold while queued) is gone from
	// the queue; one that leaves after being granted releases the lock.
	hI := holds.Next()
	attempt("I", hI, 1, true, time.Minute)
	if r, _ := Release(ctx, c, k, "I", 0, hI); r != NotHeld {
		t.Fatalf("leave while queued: %v", r)
	}
	if n := c.ZCard(ctx, k.Queue).Val(); n != 0 {
		t.Fatalf("queue has %d entries after I left", n)
	}
	hJ := holds.Next()
	attempt("J", hJ, 1, true, time.Minute)
	if r, _ := Release(ctx, c, k, "G", 0, hG); r != Freed {
		t.Fatal("G release")
	}
	if g, _ := ParseGrant(next()); g.Hold != hJ {
		t.Fatalf("grant to %q, want J", g.Hold)
	}
	if r, _ := Release(ctx, c, k, "J", 0, hJ); r != Freed {
		t.Fatalf("J leaving after its grant: %v, want Freed", r)
	}
	next() // plain wake-up

	// An expired lock with a live waiter at the head: the next attempt of
	// anyone else serves the head.
	hK, hL := holds.Next(), holds.Next()
	if r, err := FairAcquire(ctx, c, k, "K", 30*time.Millisecond, FairAttempt{Hold: hK, N: 1, Enqueue: true, QueueTTL: time.Minute}); err != nil || r.Outcome != Acquired {
		t.Fatalf("K: %+v %v", r, err)
	}
	attempt("L", hL, 1, true, time.Minute)
	expired(t, c, k)
	if r := attempt("M", holds.Next(), 1, false, time.Minute); r.Outcome != Busy || r.Holder != "L" {
		t.Fatalf("M after K expired: %+v, want Busy held by L (served)", r)
	}
	if g, _ := ParseGrant(next()); g.Hold != hL {
		t.Fatalf("grant to %q, want L", g.Hold)
	}
	// A free lock served to the head waiter of owner P is P's: P's other
	// attempt at that moment nests instead of finding it busy.
	if r, _ := Release(ctx, c, k, "L", 0, hL); r != Freed {
		t.Fatalf("L release: %v", r)
	}
	next()
	hP1 := holds.Next()
	if r, err := FairAcquire(ctx, c, k, "Q", 30*time.Millisecond, FairAttempt{Hold: holds.Next(), N: 1, Enqueue: true, QueueTTL: time.Minute}); err != nil || r.Outcome != Acquired {
		t.Fatalf("Q: %+v %v", r, err)
	}
	attempt("P", hP1, 1, true, time.Minute)
	expired(t, c, k)
	if r := attempt("P", holds.Next(), 1, false, time.Minute); r.Outcome != Reentered {
		t.Fatalf("P's second attempt when the lock was served to P's first: %+v, want Reentered", r)
	}
	if g, _ := ParseGrant(next()); g.Hold != hP1 {
		t.Fatalf("grant to %q, want P's first hold", g.Hold)
	}

	// The queue's keys expire: twice the queue TTL after the last renewal.
	attempt("N", holds.Next(), 1, true, time.Second)
	for _, name := range []string{k.Queue, k.Waiters} {
		if ttl := c.PTTL(ctx, name).Val(); ttl <= 0 || ttl > 2*time.Second {
			t.Errorf("%s: PTTL %v, want (0, 2s]", name, ttl)
		}
	}
}

// expired waits until the lock key of k has expired (EXISTS expires it).
func expired(t *testing.T, c *goredis.Client, k Keys) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Exists(t.Context(), k.Lock).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("lock key did not expire")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// entryDead waits until the server's clock has passed the deadline of
// hold's queue entry.
func entryDead(t *testing.T, c *goredis.Client, k Keys, hold string) {
	t.Helper()
	e, err := c.HGet(t.Context(), k.Waiters, hold).Result()
	require.NoError(t, err)
	var dl int64
	if _, err := fmt.Sscan(e, &dl); err != nil {
		t.Fatalf("entry %q: %v", e, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Time(t.Context()).Val().UnixMicro() <= dl {
		if time.Now().After(deadline) {
			t.Fatal("the server's clock did not pass the entry's deadline")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestParseGrant(t *testing.T) {
	g, ok := ParseGrant("ghAAA 12 3 4500")
	if !ok || g != (Grant{Hold: "hAAA", Token: 12, Attempt: 3, Elapsed: 4500 * time.Microsecond}) {
		t.Fatalf("%+v %v", g, ok)
	}
	for _, bad := range []string{"", "12", "g", "ghA 1 2", "gxA 1 2 3", "ghA 1 2 -3", "ghA x 2 3"} {
		if _, ok := ParseGrant(bad); ok {
			t.Errorf("ParseGrant(%q) ok", bad)
		}
	}
	if GrantHold("ghA 1 2 3") != "hA" || GrantHold("17") != "" {
		t.Error("GrantHold")
	}
}
