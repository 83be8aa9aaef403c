package redis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testserver"
)

// testLocker is a Locker over its own client, with the driver at hand.
type testLocker struct {
	distlock.Locker
	d      *driver
	client *goredis.Client
}

func newTestLocker(t *testing.T, o *goredis.Options, opts ...Option) *testLocker {
	t.Helper()
	client := goredis.NewClient(o)
	c, err := newConfig(append(opts, WithCloseClient()))
	if err != nil {
		t.Fatal(err)
	}
	d, err := newDriver(client, c)
	if err != nil {
		t.Fatal(err)
	}
	l := &testLocker{Locker: distlock.New(d.backend(), "redis", c.defaults...), d: d, client: client}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func adminClient(t *testing.T, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func tctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 20ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scanKeys returns every key of the current database.
func scanKeys(t *testing.T, c *goredis.Client) []string {
	t.Helper()
	var keys []string
	iter := c.Scan(tctx(t, 10*time.Second), 0, "*", 100).Iterator()
	for iter.Next(t.Context()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN: %v", err)
	}
	return keys
}

// holds returns the hold fields of a lock hash.
func holds(h map[string]string) []string {
	var out []string
	for f := range h {
		if strings.HasPrefix(f, "h") {
			out = append(out, f)
		}
	}
	return out
}

func TestKeysFor(t *testing.T) {
	seen := map[string]string{}
	for _, key := range []string{"a", "A", "a ", "{x}", "}{", "a\x00b", "a\x00c", strings.Repeat("k", 1024), strings.Repeat("k", 1023) + "j", "🔒"} {
		k := redislua.KeysFor("p:", key)
		if len(k.Lock) != len("p:")+2+redislua.TagLen {
			t.Errorf("KeysFor(%q).Lock = %q: not fixed length", key, k.Lock)
		}
		if k.Fence != k.Lock+":fence" || k.Channel != k.Lock+":wake" {
			t.Errorf("KeysFor(%q) = %+v: names do not share the lock name", key, k)
		}
		tag := k.Lock[strings.IndexByte(k.Lock, '{')+1 : strings.IndexByte(k.Lock, '}')]
		if len(tag) != redislua.TagLen || strings.ContainsAny(tag, "{}") {
			t.Errorf("KeysFor(%q): bad hash tag %q", key, tag)
		}
		if prev, dup := seen[k.Lock]; dup {
			t.Errorf("keys %q and %q map to the same name %q", prev, key, k.Lock)
		}
		seen[k.Lock] = key
	}
	// A prefix containing braces still keeps the three names in one slot.
	k := redislua.KeysFor("a{b", "key")
	for _, name := range []string{k.Fence, k.Channel} {
		if slot(name) != slot(k.Lock) {
			t.Errorf("prefix with '{': %q and %q in different slots", name, k.Lock)
		}
	}
}

// slot returns the part of a name Redis Cluster hashes.
func slot(name string) string {
	if i := strings.IndexByte(name, '{'); i >= 0 {
		if j := strings.IndexByte(name[i+1:], '}'); j > 0 {
			return name[i+1 : i+1+j]
		}
	}
	return name
}

func TestTTLValidation(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, 30*time.Second)
	for _, ttl := range []time.Duration{time.Microsecond, 999 * time.Microsecond, 1500 * time.Microsecond, 2 * time.Millisecond, time.Second + time.Nanosecond} {
		if _, err := l.TryAcquire(ctx, "ttl", distlock.WithTTL(ttl)); !errors.Is(err, distlock.ErrInvalidTTL) {
			t.Errorf("TryAcquire with TTL %v = %v, want ErrInvalidTTL", ttl, err)
		}
	}
	// 3ms is the minimum: 1ms of validity is left after the drift
	// allowance (too little to acquire through distlock under -race, so
	// check the policy itself).
	if v, err := l.d.Validity(3 * time.Millisecond); err != nil || v != 970*time.Microsecond {
		t.Errorf("Validity(3ms) = %v, %v; want 970µs", v, err)
	}
	lease, err := l.TryAcquire(ctx, "ttl", distlock.WithTTL(1001*time.Millisecond), distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("TTL 1001ms: %v", err)
	}
	_ = lease.Release(ctx)
	lease, err = l.TryAcquire(ctx, "ttl", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Refresh(ctx, 1500*time.Microsecond); !errors.Is(err, distlock.ErrInvalidTTL) {
		t.Errorf("Refresh(1.5ms) = %v, want ErrInvalidTTL", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The driver refuses too, even when called directly.
	if _, err := l.d.TryAcquire(ctx, backend.Request{Key: "ttl", Owner: "o", TTL: 1500 * time.Microsecond}); !errors.Is(err, backend.ErrInvalidTTL) {
		t.Errorf("driver TryAcquire with 1.5ms = %v, want ErrInvalidTTL", err)
	}
}

// TestSeedsExpiryScenario is the seeds' timeline, inspected in Redis: A's
// lock expires, B acquires, A's stale Release leaves B's lock intact.
func TestSeedsExpiryScenario(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	a := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	b := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, time.Minute)
	const key = "seeds/resource"
	name := redislua.KeysFor(redislua.DefaultPrefix, key).Lock

	leaseA, err := a.TryAcquire(ctx, key, distlock.WithTTL(300*time.Millisecond), distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	h := admin.HGetAll(ctx, name).Val()
	if h["o"] != leaseA.Owner() || h["t"] != strconv.FormatUint(leaseA.Token(), 10) || len(holds(h)) != 1 {
		t.Fatalf("A's lock in Redis = %v, want owner %q token %d and one hold", h, leaseA.Owner(), leaseA.Token())
	}
	if pttl := admin.PTTL(ctx, name).Val(); pttl <= 0 || pttl > 300*time.Millisecond {
		t.Fatalf("A's lock PTTL = %v, want (0, 300ms]", pttl)
	}
	select {
	case <-leaseA.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("A's lease not ended after its TTL")
	}
	leaseB, err := b.Acquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"o": leaseB.Owner(), "t": strconv.FormatUint(leaseB.Token(), 10)}
	check := func(when string) {
		t.Helper()
		h := admin.HGetAll(ctx, name).Val()
		if h["o"] != want["o"] || h["t"] != want["t"] || len(holds(h)) != 1 {
			t.Fatalf("%s: lock in Redis = %v, want B's owner %q token %s with one hold", when, h, want["o"], want["t"])
		}
		if pttl := admin.PTTL(ctx, name).Val(); pttl < 50*time.Second {
			t.Fatalf("%s: PTTL = %v, want B's TTL (about 1m)", when, pttl)
		}
	}
	check("after B acquired")
	if leaseB.Token() <= leaseA.Token() {
		t.Errorf("B's token %d not above A's %d", leaseB.Token(), leaseA.Token())
	}
	if err := leaseA.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("A's stale Release = %v, want ErrNotHeld", err)
	}
	check("after A's stale Release")
	// The driver's own check, bypassing distlock's lease state: A's
	// backend lock (same owner id, old token) must change nothing.
	stale := &lock{d: a.d, keys: redislua.KeysFor(redislua.DefaultPrefix, key), owner: leaseB.Owner(), token: leaseA.Token(), hold: "hstale"}
	if err := stale.Release(ctx); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("release with B's owner but A's token = %v, want ErrNotHeld", err)
	}
	if err := stale.Refresh(ctx, time.Hour); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("refresh with B's owner but A's token = %v, want ErrNotHeld", err)
	}
	check("after stale driver calls")
	if err := leaseB.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := admin.Exists(ctx, name).Val(); n != 0 {
		t.Errorf("lock key still exists after B's Release")
	}
}

// TestReentrantNeverShortens: a nested acquire or a refresh with a shorter
// TTL keeps the longer expiry; holds are counted in the hash.
func TestReentrantNeverShortens(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, time.Minute)
	name := redislua.KeysFor(redislua.DefaultPrefix, "re").Lock
	me := distlock.WithOwner("me")
	l1, err := l.TryAcquire(ctx, "re", me, distlock.WithTTL(time.Minute), distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := l.TryAcquire(ctx, "re", me, distlock.WithTTL(time.Second), distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if pttl := admin.PTTL(ctx, name).Val(); pttl < 50*time.Second {
		t.Errorf("nested acquire with a 1s TTL shortened the expiry to %v", pttl)
	}
	if err := l2.Refresh(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if pttl := admin.PTTL(ctx, name).Val(); pttl < 50*time.Second {
		t.Errorf("refresh with a 1s TTL shortened the expiry to %v", pttl)
	}
	if err := l1.Refresh(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if pttl := admin.PTTL(ctx, name).Val(); pttl < 110*time.Second {
		t.Errorf("refresh with 2m: expiry %v", pttl)
	}
	if n := len(holds(admin.HGetAll(ctx, name).Val())); n != 2 {
		t.Errorf("%d holds in the hash, want 2", n)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(holds(admin.HGetAll(ctx, name).Val())); n != 1 {
		t.Errorf("%d holds after one release, want 1", n)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if admin.Exists(ctx, name).Val() != 0 {
		t.Errorf("lock key left after the last release")
	}
}

// TestBusyReportsRemainingTTL: TryAcquire on a held lock returns the
// holder's PTTL, which caps a notified waiter's wait: a waiter with a
// one-minute retry policy still takes over a crashed holder's lock (no
// release, so no message) right after its TTL.
func TestBusyReportsRemainingTTL(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	a := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	b := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, time.Minute)
	holder, err := a.TryAcquire(ctx, "busy", distlock.WithTTL(1500*time.Millisecond), distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.TryAcquire(ctx, "busy")
	var busy *backend.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire on a held lock = %v, want a BusyError", err)
	}
	if busy.RetryAfter <= 0 || busy.RetryAfter > 1500*time.Millisecond {
		t.Errorf("RetryAfter = %v, want the holder's remaining TTL (0, 1.5s]", busy.RetryAfter)
	}
	start := time.Now()
	slow := distlock.WithRetry(distlock.Backoff{Min: time.Minute, Max: time.Minute})
	lease, err := b.Acquire(ctx, "busy", slow)
	if err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("waiter took %v to notice the expired holder (TTL 1.5s)", took)
	}
	if !errors.Is(holder.Err(), distlock.ErrLockLost) {
		t.Errorf("holder's lease: %v, want ErrLockLost", holder.Err())
	}
	_ = lease.Release(ctx)
}

// cutter makes connections whose reply to the next acquire script is lost
// after the request reached Redis: the ambiguous acquire.
type cutter struct {
	armed atomic.Bool
	cuts  atomic.Int32
}

func (c *cutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: conn, c: c}, nil
}

type cutConn struct {
	net.Conn
	c *cutter
}

var acquireSHA, _, _ = redislua.ScriptHashes()

func (cc *cutConn) Write(b []byte) (int, error) {
	n, err := cc.Conn.Write(b)
	if err == nil && bytes.Contains(b, []byte(acquireSHA)) && cc.c.armed.CompareAndSwap(true, false) {
		time.Sleep(100 * time.Millisecond) // Redis runs the script
		cc.c.cuts.Add(1)
		_ = cc.Conn.Close() // and the reply is lost
	}
	return n, err
}

// TestAmbiguousAcquire: an acquire whose reply is lost leaves no orphan
// lock. Without client retries the driver undoes its hold in the
// background; with go-redis's retries the retry, carrying the same hold id,
// is idempotent and the lock has exactly one hold.
func TestAmbiguousAcquire(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	ctx := tctx(t, time.Minute)
	// Load the scripts, so that the cut hits a script that runs (not an
	// EVALSHA answered with NOSCRIPT).
	warm := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	if lease, err := warm.TryAcquire(ctx, "ambiguous/warm"); err != nil {
		t.Fatal(err)
	} else if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("undone", func(t *testing.T) {
		cut := &cutter{}
		l := newTestLocker(t, &goredis.Options{Addr: srv.Addr(), Dialer: cut.dial, MaxRetries: -1})
		const key = "ambiguous/undone"
		k := redislua.KeysFor(redislua.DefaultPrefix, key)
		cut.armed.Store(true)
		_, err := l.TryAcquire(ctx, key, distlock.WithTTL(time.Hour))
		if err == nil || !errors.Is(err, distlock.ErrUnavailable) {
			t.Fatalf("acquire with its reply lost = %v, want ErrUnavailable", err)
		}
		if cut.cuts.Load() != 1 {
			t.Fatalf("the reply was not cut")
		}
		if admin.Get(ctx, k.Fence).Val() != "1" {
			t.Fatalf("the script did not run on the server: the test proves nothing")
		}
		eventually(t, 10*time.Second, "orphan hold removed in the background", func() bool {
			return admin.Exists(ctx, k.Lock).Val() == 0
		})
		// Another owner gets it at once, not after the hour-long TTL.
		other := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
		lease, err := other.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("lock after an undone ambiguous acquire: %v", err)
		}
		_ = lease.Release(ctx)
	})

	t.Run("retried", func(t *testing.T) {
		cut := &cutter{}
		l := newTestLocker(t, &goredis.Options{Addr: srv.Addr(), Dialer: cut.dial})
		const key = "ambiguous/retried"
		k := redislua.KeysFor(redislua.DefaultPrefix, key)
		cut.armed.Store(true)
		lease, err := l.TryAcquire(ctx, key, distlock.WithTTL(time.Hour))
		if err != nil {
			t.Fatalf("acquire retried by go-redis after a lost reply: %v", err)
		}
		if cut.cuts.Load() != 1 {
			t.Fatalf("the reply was not cut")
		}
		h := admin.HGetAll(ctx, k.Lock).Val()
		if len(holds(h)) != 1 || h["o"] != lease.Owner() {
			t.Fatalf("lock after a retried acquire = %v, want one hold of %q", h, lease.Owner())
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if admin.Exists(ctx, k.Lock).Val() != 0 {
			t.Errorf("lock key left after the only release")
		}
	})
}

// TestNoLeftoverKeys: cancelled and timed-out acquisitions, busy
// TryAcquires, expiries and releases leave nothing in Redis but the
// fencing counter.
func TestNoLeftoverKeys(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	ls := []*testLocker{
		newTestLocker(t, &goredis.Options{Addr: srv.Addr()}),
		newTestLocker(t, &goredis.Options{Addr: srv.Addr()}),
		newTestLocker(t, &goredis.Options{Addr: srv.Addr()}),
	}
	ctx := tctx(t, time.Minute)
	const key = "leftover"
	holder, err := ls[0].TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			l := ls[1+i%2]
			if i%3 == 0 {
				_, err := l.TryAcquire(ctx, key)
				if !errors.Is(err, distlock.ErrNotAcquired) {
					t.Errorf("TryAcquire: %v", err)
				}
				return
			}
			c, cancel := context.WithTimeout(ctx, time.Duration(50+20*i)*time.Millisecond)
			if i%3 == 1 {
				c, cancel = context.WithCancel(ctx)
				time.AfterFunc(time.Duration(30*i)*time.Millisecond, cancel)
			}
			defer cancel()
			if _, err := l.Acquire(c, key); !errors.Is(err, distlock.ErrNotAcquired) {
				t.Errorf("abandoned Acquire: %v", err)
			}
		})
	}
	wg.Wait()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// An expiry, too.
	if _, err := ls[1].TryAcquire(ctx, key, distlock.WithTTL(50*time.Millisecond), distlock.WithAutoRefresh(false)); err != nil {
		t.Fatal(err)
	}
	k := redislua.KeysFor(redislua.DefaultPrefix, key)
	eventually(t, 5*time.Second, "expired lock key gone", func() bool { return admin.Exists(ctx, k.Lock).Val() == 0 })
	keys := scanKeys(t, admin)
	if len(keys) != 1 || keys[0] != k.Fence {
		t.Errorf("keys left in Redis: %q, want only the fencing counter %q", keys, k.Fence)
	}
}

// TestServerKilled: with the server gone, Acquire fails with
// ErrUnavailable within its ctx; after a restart without persistence the
// held lease has ended and a new acquisition works.
func TestServerKilled(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	if !srv.Controllable() {
		t.Skip("external server")
	}
	holderL := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	other := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, 2*time.Minute)
	held, err := holderL.TryAcquire(ctx, "killed", distlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"Acquire", "TryAcquire"} {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		start := time.Now()
		var err error
		if op == "Acquire" {
			_, err = other.Acquire(actx, "killed")
		} else {
			_, err = other.TryAcquire(actx, "killed")
		}
		took := time.Since(start)
		ctxErr := actx.Err()
		cancel()
		if !errors.Is(err, distlock.ErrUnavailable) {
			t.Errorf("%s with the server down = %v, want ErrUnavailable", op, err)
		}
		if ctxErr != nil {
			t.Errorf("%s with the server down took %v: it must fail within its ctx", op, took)
		}
		var opErr *net.OpError
		if !errors.As(err, &opErr) {
			t.Errorf("%s error %v: the network error is not reachable with errors.As", op, err)
		}
		var de *distlock.Error
		if !errors.As(err, &de) || de.Backend != "redis" {
			t.Errorf("%s error %v is not a *distlock.Error from redis", op, err)
		}
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
		if !errors.Is(held.Err(), distlock.ErrLockLost) {
			t.Errorf("held lease ended with %v, want ErrLockLost", held.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("held lease still open 10s after a restart that lost its lock")
	}
	var lease *distlock.Lease
	eventually(t, 10*time.Second, "acquire after restart", func() bool {
		lease, err = other.TryAcquire(ctx, "killed")
		return err == nil
	})
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestServerPaused: a stopped (SIGSTOP) server makes TryAcquire return with
// its context, not hang.
func TestServerPaused(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	if !srv.Controllable() {
		t.Skip("external server")
	}
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	if err := l.client.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Resume() }()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := l.TryAcquire(ctx, "paused")
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("TryAcquire on a paused server took %v with a 500ms ctx", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("TryAcquire on a paused server = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
}

func TestUnreachableAtOpen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	l, err := distlock.Open(t.Context(), "redis://"+addr+"/0?dial_timeout=1s")
	if err != nil {
		t.Fatalf("Open is lazy, want no error for an unreachable server: %v", err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err = l.Acquire(ctx, "k")
	if !errors.Is(err, distlock.ErrUnavailable) || ctx.Err() != nil {
		t.Errorf("Acquire on an unreachable server = %v after %v, want ErrUnavailable within its ctx", err, time.Since(start))
	}
}

func TestBadURLs(t *testing.T) {
	conformance.RefusesURLs(t,
		"redis://127.0.0.1:6379/abc",
		"redis://127.0.0.1:6379/0/1",
		"redis://127.0.0.1:6379/0?nosuch=1",
		"redis://127.0.0.1:6379/0?dial_timeout=soon",
		"redis://127.0.0.1:6379/0?pool_size=many",
		"redis://127.0.0.1:6379/0?prefix=a&prefix=b",
		"redis://127.0.0.1:6379/0?subscribe_timeout=-1s",
		"redis://127.0.0.1:6379/0?subscribe_timeout=x",
		"redis://127.0.0.1:6379/0?subscription_linger=x",
		"redis://127.0.0.1:6379/0?db=x",
		"redis://h1:6379,h2:6379/0",
		"redis://127.0.0.1:6379/0#frag",
		"redis:127.0.0.1:6379",
		"redis://127.0.0.1:port/0",
		"redis://[::1/0",
		"rediss://127.0.0.1:6379?skip_verify=maybe",
		"redis://127.0.0.1:6379/0?%zz",
		"redis://%zz@127.0.0.1/0",
	)
	// Valid URLs open (lazily) and close.
	for _, u := range []string{
		"redis://127.0.0.1:1",
		"redis://user:p%40ss@127.0.0.1:1/3?dial_timeout=1s&pool_size=5&prefix=app:&client_name=x",
		"rediss://127.0.0.1:1/0?skip_verify=true&subscribe_timeout=3s&subscription_linger=0s",
		"redis://[::1]:1/2?max_retries=-1&protocol=2",
	} {
		l, err := distlock.Open(t.Context(), u)
		if err != nil {
			t.Errorf("Open(%q): %v", u, err)
			continue
		}
		if caps := l.Capabilities(); !caps.Fencing || !caps.Reentrant || !caps.Notify || !caps.Expiring || caps.Durable || caps.Fair || caps.SessionBound {
			t.Errorf("Capabilities = %+v", caps)
		}
		if err := l.Close(); err != nil {
			t.Errorf("Close(%q): %v", u, err)
		}
	}
	u, _ := parseURLForTest("redis://127.0.0.1:1/0?prefix=app:&subscribe_timeout=3s&subscription_linger=0s&dial_timeout=2s")
	if u.c.prefix != "app:" || u.c.confirmTimeout != 3*time.Second || u.c.linger >= 0 || u.opt.DialTimeout != 2*time.Second || u.opt.Addr != "127.0.0.1:1" {
		t.Errorf("parsed %+v / %+v", u.c, u.opt)
	}
}

type parsed struct {
	opt *goredis.Options
	c   config
}

func parseURLForTest(raw string) (parsed, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return parsed{}, err
	}
	opt, opts, err := parseURL(u)
	if err != nil {
		return parsed{}, err
	}
	c, err := newConfig(opts)
	return parsed{opt, c}, err
}

// pubsubClients returns the CLIENT LIST entries in pub/sub mode.
func pubsubClients(t *testing.T, admin *goredis.Client) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(admin.ClientList(t.Context()).Val(), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "flags=") && strings.Contains(f, "P") {
				out = append(out, line)
			}
		}
	}
	return out
}

// cmdCounter counts the commands a client sends that match.
type cmdCounter struct {
	match func(goredis.Cmder) bool
	n     atomic.Int64
}

// newAcquireCounter counts the acquire scripts (EVALSHA of the plain acquire).
func newAcquireCounter() *cmdCounter {
	return &cmdCounter{match: func(cmd goredis.Cmder) bool {
		args := cmd.Args()
		return len(args) > 1 && args[1] == acquireSHA
	}}
}

// newScriptCounter counts every script (EVALSHA or EVAL).
func newScriptCounter() *cmdCounter {
	return &cmdCounter{match: func(cmd goredis.Cmder) bool { n := cmd.Name(); return n == "evalsha" || n == "eval" }}
}

func (c *cmdCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (c *cmdCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if c.match(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *cmdCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestNotifySharedSubscription: waiters are woken by the release's pub/sub
// message, not by polling, and all waiters of one Locker share ONE pub/sub
// connection, whether they wait for one key or for many.
func TestNotifySharedSubscription(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	w := newTestLocker(t, &goredis.Options{Addr: srv.Addr(), ClientName: "waiters"})
	counter := newAcquireCounter()
	w.client.AddHook(counter)
	ctx := tctx(t, 2*time.Minute)
	slow := distlock.WithRetry(distlock.Backoff{Min: time.Minute, Max: time.Minute})
	const n = 8

	for _, shape := range []string{"one key", "distinct keys"} {
		t.Run(shape, func(t *testing.T) {
			keyOf := func(i int) string {
				if shape == "one key" {
					return "notify/one"
				}
				return fmt.Sprintf("notify/%d", i)
			}
			var held []*distlock.Lease
			for i := range n {
				if i > 0 && shape == "one key" {
					break
				}
				l, err := holder.TryAcquire(ctx, keyOf(i), distlock.WithTTL(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, l)
			}
			before := counter.n.Load()
			type res struct {
				lease *distlock.Lease
				at    time.Time
				err   error
			}
			results := make(chan res, n)
			for i := range n {
				go func() {
					lease, err := w.Acquire(ctx, keyOf(i), slow)
					results <- res{lease, time.Now(), err}
				}()
			}
			channels := n
			if shape == "one key" {
				channels = 1
			}
			eventually(t, 10*time.Second, "waiters subscribed", func() bool {
				_, c := w.d.sub.Active()
				return c == channels && counter.n.Load()-before == 2*n // first try + retry after subscribing
			})
			ps := pubsubClients(t, admin)
			if len(ps) != 1 || !strings.Contains(ps[0], "name=waiters") || !strings.Contains(ps[0], "sub="+strconv.Itoa(channels)) {
				t.Errorf("%d waiters: pub/sub connections %q, want ONE (the waiters' Locker) with %d channels", n, ps, channels)
			}
			numsub := admin.PubSubNumSub(ctx, redislua.KeysFor(redislua.DefaultPrefix, keyOf(0)).Channel).Val()
			for _, c := range numsub {
				if c != 1 {
					t.Errorf("PUBSUB NUMSUB = %v, want 1 subscriber", numsub)
				}
			}
			time.Sleep(100 * time.Millisecond)
			if got := counter.n.Load() - before; got != 2*n {
				t.Errorf("%d acquire attempts while nothing was released: waiters poll", got)
			}
			// Release: every waiter acquires promptly, woken by messages.
			for _, l := range held {
				released := time.Now()
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if shape == "distinct keys" {
					r := <-results
					if r.err != nil {
						t.Fatal(r.err)
					}
					if lag := r.at.Sub(released); lag > 2*time.Second {
						t.Errorf("waiter woke %v after the release", lag)
					}
					_ = r.lease.Release(ctx)
				}
			}
			if shape == "one key" {
				for range n {
					select {
					case r := <-results:
						if r.err != nil {
							t.Fatal(r.err)
						}
						if err := r.lease.Release(ctx); err != nil {
							t.Fatal(err)
						}
					case <-time.After(10 * time.Second):
						t.Fatal("waiters on one key not all served within 10s of the releases: notifications lost")
					}
				}
			}
			attempts := counter.n.Load() - before
			t.Logf("%s: %d waiters, %d acquire attempts in all", shape, n, attempts)
			if shape == "distinct keys" && attempts != 3*n {
				t.Errorf("%d acquire attempts, want %d (try, retry after subscribing, and one after the wake-up)", attempts, 3*n)
			}
		})
	}
}

// TestSubscriptionLifecycle: the shared subscription's goroutine and
// connection exist only while someone waits, and nothing is left after
// Close.
func TestSubscriptionLifecycle(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	ctx := tctx(t, time.Minute)
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	base := runtime.NumGoroutine()

	w := newTestLocker(t, &goredis.Options{Addr: srv.Addr()}, WithSubscriptionLinger(0))
	wait := func(key string) (chan error, *distlock.Lease) {
		held, err := holder.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			lease, err := w.Acquire(ctx, key)
			if err == nil {
				err = lease.Release(ctx)
			}
			done <- err
		}()
		eventually(t, 10*time.Second, "waiter subscribed", func() bool { _, c := w.d.sub.Active(); return c == 1 })
		return done, held
	}
	done, held := wait("life/1")
	if active, _ := w.d.sub.Active(); !active || len(pubsubClients(t, admin)) != 1 {
		t.Fatalf("no subscription while a waiter waits")
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "subscription closed after the last waiter left", func() bool {
		active, _ := w.d.sub.Active()
		return !active && len(pubsubClients(t, admin)) == 0
	})

	// Close while a waiter waits: the waiter ends with ErrClosed, the
	// reader goroutine and every connection are gone.
	done, held = wait("life/2")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, distlock.ErrClosed) {
			t.Errorf("waiter after Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not ended 5s after Close")
	}
	_ = held.Release(ctx)
	eventually(t, 5*time.Second, "pub/sub connection closed", func() bool { return len(pubsubClients(t, admin)) == 0 })
	// Close returns when the reader's deferred wg.Done has run, a moment
	// before its goroutine is gone from the stack dump: poll both.
	eventually(t, 5*time.Second, "goroutines back to the baseline and no subscriber reader after Close", func() bool {
		return runtime.NumGoroutine() <= base && !goroutineRunning("redissub.(*Subscriber).read")
	})
}

// TestLingerStopsGoroutine: with the default linger the goroutine stops
// shortly after the last waiter left.
func TestLingerStopsGoroutine(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	ctx := tctx(t, time.Minute)
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	w := newTestLocker(t, &goredis.Options{Addr: srv.Addr()}, WithSubscriptionLinger(300*time.Millisecond))
	held, err := holder.TryAcquire(ctx, "linger", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ch, cancel := w.d.Watch(t.Context(), "linger")
	if ch == nil {
		t.Fatal("nil channel")
	}
	if active, c := w.d.sub.Active(); !active || c != 1 {
		t.Fatalf("Watch returned before subscribing: active=%v channels=%d", active, c)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up after the release")
	}
	cancel()
	cancel() // idempotent
	// The unsubscribe runs in the background; the session lingers.
	eventually(t, 250*time.Millisecond, "unsubscribed and lingering (session up, 0 channels)", func() bool {
		active, c := w.d.sub.Active()
		return active && c == 0
	})
	// The session is detached first; its reader exits once the
	// connection is closed.
	eventually(t, 5*time.Second, "lingering subscription and its reader goroutine ended", func() bool {
		active, _ := w.d.sub.Active()
		return !active && !goroutineRunning("redissub.(*Subscriber).read")
	})
}

func goroutineRunning(fn string) bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), fn)
}

// TestSubscriptionSurvivesReconnect: when the shared pub/sub connection is
// killed, waiters are woken (messages may have been lost) and the
// subscription is re-established, so later releases still wake waiters.
func TestSubscriptionSurvivesReconnect(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	ctx := tctx(t, time.Minute)
	holder := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	w := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	held, err := holder.TryAcquire(ctx, "reconnect", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ch, cancel := w.d.Watch(t.Context(), "reconnect")
	defer cancel()
	if n := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Val(); n != 1 {
		t.Fatalf("killed %d pub/sub clients, want 1", n)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("watcher not woken after its connection was killed")
	}
	eventually(t, 10*time.Second, "resubscribed", func() bool { return len(pubsubClients(t, admin)) == 1 })
	// A second watcher of the same key waits for the resubscription.
	ch2, cancel2 := w.d.Watch(t.Context(), "reconnect")
	defer cancel2()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The release wakes the head of the queue (the first watcher); when it
	// leaves, it hands the wake-up on to the second.
	for i, c := range []<-chan struct{}{ch, ch2} {
		select {
		case <-c:
		case <-time.After(5 * time.Second):
			t.Fatalf("watcher %d not woken by a release after the reconnect", i)
		}
		if i == 0 {
			cancel()
		}
	}
}

// pipelineCounter counts round trips of a client: single commands and
// pipelines.
type pipelineCounter struct {
	single, pipelines, piped atomic.Int64
}

func (c *pipelineCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (c *pipelineCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.single.Add(1)
		return next(ctx, cmd)
	}
}
func (c *pipelineCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.pipelines.Add(1)
		c.piped.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func commandCalls(t *testing.T, admin *goredis.Client, cmd string) int64 {
	t.Helper()
	for _, line := range strings.Split(admin.Info(t.Context(), "commandstats").Val(), "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}

// TestBatchRefresh: many leases refreshed in one pipeline — one round
// trip — with per-lease results, and the NOSCRIPT fallback.
func TestBatchRefresh(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	counter := &pipelineCounter{}
	l.client.AddHook(counter)
	ctx := tctx(t, time.Minute)
	const n = 50
	items := make([]backend.RefreshItem, n)
	for i := range items {
		lk, err := l.d.TryAcquire(ctx, backend.Request{Key: fmt.Sprintf("batch/%d", i), Owner: "o" + strconv.Itoa(i), TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		items[i] = backend.RefreshItem{Lock: lk, TTL: time.Minute}
	}
	// One lock lost meanwhile (deleted behind its holder's back).
	lost := 7
	if err := admin.Del(ctx, items[lost].Lock.(*lock).keys.Lock).Err(); err != nil {
		t.Fatal(err)
	}
	// Warm up: load the refresh script and dial the pipeline connection.
	if err := items[0].Lock.Refresh(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	_ = l.d.RefreshBatch(ctx, items[:2])
	counter.single.Store(0)
	counter.pipelines.Store(0)
	counter.piped.Store(0)
	evalsha := commandCalls(t, admin, "evalsha")
	errs := l.d.RefreshBatch(ctx, items)
	if p, s, c := counter.pipelines.Load(), counter.single.Load(), counter.piped.Load(); p != 1 || s != 0 || c != n {
		t.Errorf("refresh of %d leases: %d pipelines with %d commands and %d single commands, want 1 pipeline of %d", n, p, c, s, n)
	}
	if got := commandCalls(t, admin, "evalsha") - evalsha; got != n {
		t.Errorf("INFO commandstats: %d EVALSHA, want %d", got, n)
	}
	for i, err := range errs {
		if i == lost {
			if !errors.Is(err, backend.ErrNotHeld) {
				t.Errorf("lost lock in the batch: %v, want ErrNotHeld", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("item %d: %v", i, err)
		}
		if pttl := admin.PTTL(ctx, items[i].Lock.(*lock).keys.Lock).Val(); pttl < 50*time.Second {
			t.Errorf("item %d: PTTL %v after a refresh to 1m", i, pttl)
		}
	}
	if admin.Exists(ctx, items[lost].Lock.(*lock).keys.Lock).Val() != 0 {
		t.Errorf("refresh of a lost lock recreated it")
	}

	// After SCRIPT FLUSH: EVALSHA gets NOSCRIPT, one more pipeline with EVAL.
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	counter.pipelines.Store(0)
	errs = l.d.RefreshBatch(ctx, items)
	if p := counter.pipelines.Load(); p != 2 {
		t.Errorf("after SCRIPT FLUSH: %d pipelines, want 2 (EVALSHA, then EVAL for NOSCRIPT)", p)
	}
	for i, err := range errs {
		if (i == lost) != (err != nil) {
			t.Errorf("after SCRIPT FLUSH, item %d: %v", i, err)
		}
	}
	// Single operations fall back too.
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	lease, err := l.TryAcquire(ctx, "batch/noscript")
	if err != nil {
		t.Fatalf("acquire after SCRIPT FLUSH: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release after SCRIPT FLUSH: %v", err)
	}
}

// TestAutoRefreshBatches: leases granted together are refreshed together
// by distlock's scheduler through RefreshBatch.
func TestAutoRefreshBatches(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	counter := &pipelineCounter{}
	l.client.AddHook(counter)
	ctx := tctx(t, time.Minute)
	const n = 40
	var leases []*distlock.Lease
	for i := range n {
		lease, err := l.TryAcquire(ctx, fmt.Sprintf("auto/%d", i), distlock.WithTTL(900*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, lease)
	}
	time.Sleep(2 * time.Second) // about six refresh rounds
	for _, lease := range leases {
		if err := lease.Err(); err != nil {
			t.Fatalf("auto-refreshed lease ended: %v", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d leases over 2s: %d pipelines carrying %d refreshes", n, counter.pipelines.Load(), counter.piped.Load())
	if counter.pipelines.Load() == 0 {
		t.Errorf("no refresh went through a pipeline")
	}
}
