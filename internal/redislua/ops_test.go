package redislua

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func client(t *testing.T) *goredis.Client {
	t.Helper()
	srv := testserver.Redis(t, testserver.RedisConfig{})
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestPX(t *testing.T) {
	for _, bad := range []time.Duration{0, -time.Millisecond, time.Nanosecond, 999 * time.Microsecond, 1500 * time.Microsecond} {
		if _, err := PX(bad); !errors.Is(err, backend.ErrInvalidTTL) {
			t.Errorf("PX(%v) = %v, want ErrInvalidTTL", bad, err)
		}
	}
	if px, err := PX(1500 * time.Millisecond); err != nil || px != 1500 {
		t.Errorf("PX(1.5s) = %d, %v", px, err)
	}
}

// TestPerNodeOperations walks the API the way a Redlock backend uses it
// against one node.
func TestPerNodeOperations(t *testing.T) {
	c := client(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	holds := NewHoldSource()
	k := KeysFor("t:", "resource")

	h1 := holds.Next()
	r, err := Acquire(ctx, c, k, "A", h1, "", time.Minute)
	if err != nil || r.Outcome != Acquired || r.Token != 1 {
		t.Fatalf("first acquire = %+v, %v; want Acquired token 1", r, err)
	}
	// Same hold again (a retry after a lost reply): idempotent.
	r, err = Acquire(ctx, c, k, "A", h1, "", time.Minute)
	if err != nil || r.Outcome != Reentered || r.Token != 1 {
		t.Fatalf("retry with the same hold = %+v, %v", r, err)
	}
	if n := c.HLen(ctx, k.Lock).Val(); n != 4 {
		t.Fatalf("hash has %d fields after a retried acquire, want 4 (o, t, name, one hold)", n)
	}
	// Another owner: busy with the remaining time, the holder and the
	// age of its newest hold.
	time.Sleep(50 * time.Millisecond)
	r, err = Acquire(ctx, c, k, "B", holds.Next(), "", time.Second)
	if err != nil || r.Outcome != Busy || r.PTTL < 50*time.Second || r.PTTL > time.Minute || r.Holder != "A" {
		t.Fatalf("other owner = %+v, %v; want Busy with ~1m, held by A", r, err)
	}
	if r.Age < 50*time.Millisecond || r.Age > 10*time.Second {
		t.Errorf("busy: holder's hold is %v old, want at least 50ms", r.Age)
	}
	// Nested hold of A: the newest hold decides the age.
	h2 := holds.Next()
	nestedAt := time.Now()
	if r, err = Acquire(ctx, c, k, "A", h2, "", time.Second); err != nil || r.Outcome != Reentered || r.Token != 1 {
		t.Fatalf("nested = %+v, %v", r, err)
	}
	if r, err := Acquire(ctx, c, k, "B", holds.Next(), "", time.Second); err != nil || r.Outcome != Busy || r.Age < 0 || r.Age > time.Since(nestedAt)+2*time.Millisecond {
		t.Errorf("busy after a new nested hold = %+v, %v; want the nested hold's age", r, err)
	}
	// Refresh: owner, token and hold must match; never shortens.
	if held, err := Refresh(ctx, c, k, "A", 2, h1, time.Hour); err != nil || held {
		t.Errorf("refresh with a wrong token = %v, %v; want not held", held, err)
	}
	if held, err := Refresh(ctx, c, k, "A", 1, "hnope", time.Hour); err != nil || held {
		t.Errorf("refresh with an unknown hold = %v, %v; want not held", held, err)
	}
	if held, err := Refresh(ctx, c, k, "A", 1, h1, time.Second); err != nil || !held {
		t.Errorf("refresh = %v, %v", held, err)
	}
	if pttl := c.PTTL(ctx, k.Lock).Val(); pttl < 50*time.Second {
		t.Errorf("refresh with 1s shortened the expiry to %v", pttl)
	}
	// Subscribe to the wake-up channel, then release both holds.
	ps := c.Subscribe(ctx, k.Channel)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	nextMessage := func() string { t.Helper(); return nextMessage(t, ctx, ps) }
	if rr, err := Release(ctx, c, k, "B", 1, h1); err != nil || rr != NotHeld {
		t.Errorf("release by another owner = %v, %v", rr, err)
	}
	if rr, err := Release(ctx, c, k, "A", 1, h1); err != nil || rr != HoldsLeft {
		t.Errorf("release of the first hold = %v, %v; want HoldsLeft", rr, err)
	}
	if rr, err := Release(ctx, c, k, "A", 1, h1); err != nil || rr != NotHeld {
		t.Errorf("second release of the same hold = %v, %v; want NotHeld", rr, err)
	}
	if m := nextMessage(); m != "" {
		t.Fatalf("wake-up %q while a hold remains", m)
	}
	// Token 0: undo by owner and hold alone.
	if rr, err := Release(ctx, c, k, "A", 0, h2); err != nil || rr != Freed {
		t.Errorf("release of the last hold with token 0 = %v, %v; want Freed", rr, err)
	}
	if m := nextMessage(); m != "1" {
		t.Fatalf("message %q after the lock was freed, want the wake-up with token 1", m)
	}
	if c.Exists(ctx, k.Lock).Val() != 0 || c.Get(ctx, k.Fence).Val() != "1" {
		t.Errorf("after the last release: lock exists=%d fence=%q", c.Exists(ctx, k.Lock).Val(), c.Get(ctx, k.Fence).Val())
	}
	// The counter outlives the lock.
	if r, err = Acquire(ctx, c, k, "B", holds.Next(), "", time.Minute); err != nil || r.Outcome != Acquired || r.Token != 2 {
		t.Errorf("next acquire = %+v, %v; want token 2", r, err)
	}
}

// TestNoFenceNoChannel: Keys without Fence and Channel (as a Redlock node
// may use them) leave only the lock key, with token 0.
func TestNoFenceNoChannel(t *testing.T) {
	c := client(t)
	ctx := t.Context()
	k := KeysFor("t:", "x")
	k.Fence, k.Channel = "", ""
	h := NewHoldSource().Next()
	r, err := Acquire(ctx, c, k, "A", h, "", time.Minute)
	if err != nil || r.Outcome != Acquired || r.Token != 0 {
		t.Fatalf("acquire without fence = %+v, %v", r, err)
	}
	if held, err := Refresh(ctx, c, k, "A", 0, h, time.Minute); err != nil || !held {
		t.Fatalf("refresh = %v, %v", held, err)
	}
	if rr, err := Release(ctx, c, k, "A", 0, h); err != nil || rr != Freed {
		t.Fatalf("release = %v, %v", rr, err)
	}
	if n := c.DBSize(ctx).Val(); n != 0 {
		t.Errorf("%d keys left", n)
	}
}

func TestRefreshBatchAndErrors(t *testing.T) {
	c := client(t)
	ctx := t.Context()
	holds := NewHoldSource()
	var ops []RefreshOp
	for _, key := range []string{"a", "b", "c"} {
		k := KeysFor("t:", key)
		h := holds.Next()
		if _, err := Acquire(ctx, c, k, "o", h, "", time.Second); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, RefreshOp{Keys: k, Owner: "o", Token: 1, Hold: h, TTL: time.Minute})
	}
	ops[1].Owner = "other"
	ops = append(ops, RefreshOp{Keys: ops[0].Keys, Owner: "o", Token: 1, Hold: ops[0].Hold, TTL: 1500 * time.Microsecond})
	res := RefreshBatch(ctx, c, ops)
	if !res[0].Held || res[1].Held || res[1].Err != nil || !res[2].Held || !errors.Is(res[3].Err, backend.ErrInvalidTTL) {
		t.Errorf("batch results %+v", res)
	}
	// Errors: a WRONGTYPE reply is not "unavailable"; a dead server is.
	require.NoError(t, c.Set(ctx, "t:wrong", "x", 0).Err())
	_, err := Acquire(ctx, c, Keys{Lock: "t:wrong"}, "o", holds.Next(), "", time.Second)
	if err == nil || !IsReply(err) || Ambiguous(err) || errors.Is(Classify(ctx, err), backend.ErrUnavailable) {
		t.Errorf("WRONGTYPE: %v (classified %v)", err, Classify(ctx, err))
	}
	// A dead server refuses the connection: unavailable, but the command
	// was never sent, so not ambiguous.
	dead := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer dead.Close()
	_, err = Acquire(ctx, dead, KeysFor("t:", "x"), "o", holds.Next(), "", time.Second)
	if err == nil || Ambiguous(err) || !errors.Is(Classify(ctx, err), backend.ErrUnavailable) {
		t.Errorf("dead server: %v (ambiguous %v, classified %v)", err, Ambiguous(err), Classify(ctx, err))
	}
	assert.Equal(t, backend.CodeTransient, ErrorCode(err), "dead server: ErrorCode(%v)", err)
	// A server that takes the command and never answers: ambiguous.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	mute := goredis.NewClient(&goredis.Options{Addr: ln.Addr().String(), MaxRetries: -1, ReadTimeout: 200 * time.Millisecond, Protocol: 2, DisableIdentity: true})
	defer mute.Close()
	_, err = Acquire(ctx, mute, KeysFor("t:", "x"), "o", holds.Next(), "", time.Second)
	if !Ambiguous(err) || !errors.Is(Classify(ctx, err), backend.ErrUnavailable) {
		t.Errorf("mute server: %v (ambiguous %v, classified %v)", err, Ambiguous(err), Classify(ctx, err))
	}
	assert.Equal(t, backend.CodeTransient, ErrorCode(err), "mute server: ErrorCode(%v)", err)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, Classify(cctx, context.Canceled), context.Canceled, "Classify(canceled)")
}

// commandCalls is the server's count of cmd since the last CONFIG
// RESETSTAT (INFO commandstats).
func commandCalls(t *testing.T, c *goredis.Client, cmd string) int {
	t.Helper()
	info, err := c.Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":"); ok {
			var n int
			if _, err := fmt.Sscanf(rest, "calls=%d", &n); err == nil {
				return n
			}
		}
	}
	return 0
}

// nextMessage returns the payload of the next message on ps, or "" if
// none came before a PING sent now: the server delivers in order on one
// connection, so a message published before the PING arrives before its
// PONG.
func nextMessage(t *testing.T, ctx context.Context, ps *goredis.PubSub) string {
	t.Helper()
	require.NoError(t, ps.Ping(ctx, "barrier"))
	m, err := ps.ReceiveTimeout(ctx, 5*time.Second)
	require.NoError(t, err)
	if msg, ok := m.(*goredis.Message); ok {
		if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil { // the PONG
			t.Fatal(err)
		}
		return msg.Payload
	}
	return ""
}
