package redis

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
		require.Equal(t, int32(1), cut.cuts.Load(), "the reply was not cut")
		require.Equal(t, "1", admin.Get(ctx, k.Fence).Val(), "the script did not run on the server: the test proves nothing")
		eventually(t, 10*time.Second, "orphan hold removed in the background", func() bool {
			return admin.Exists(ctx, k.Lock).Val() == 0
		})
		// Another owner gets it at once, not after the hour-long TTL.
		other := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
		lease, err := other.TryAcquire(ctx, key)
		require.NoError(t, err, "lock after an undone ambiguous acquire")
		_ = lease.Release(ctx)
	})

	t.Run("retried", func(t *testing.T) {
		cut := &cutter{}
		l := newTestLocker(t, &goredis.Options{Addr: srv.Addr(), Dialer: cut.dial})
		const key = "ambiguous/retried"
		k := redislua.KeysFor(redislua.DefaultPrefix, key)
		cut.armed.Store(true)
		lease, err := l.TryAcquire(ctx, key, distlock.WithTTL(time.Hour))
		require.NoError(t, err, "acquire retried by go-redis after a lost reply")
		require.Equal(t, int32(1), cut.cuts.Load(), "the reply was not cut")
		h := admin.HGetAll(ctx, k.Lock).Val()
		if len(holds(h)) != 1 || h["o"] != lease.Owner() {
			t.Fatalf("lock after a retried acquire = %v, want one hold of %q", h, lease.Owner())
		}
		require.NoError(t, lease.Release(ctx))
		assert.Equal(t, int64(0), admin.Exists(ctx, k.Lock).Val(), "lock key left after the only release")
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
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			l := ls[1+i%2]
			if i%3 == 0 {
				_, err := l.TryAcquire(ctx, key)
				assert.ErrorIs(t, err, distlock.ErrNotAcquired, "TryAcquire")
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
	require.NoError(t, holder.Release(ctx))
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
	require.NoError(t, err)
	require.NoError(t, srv.Kill())
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
		assert.ErrorIs(t, err, distlock.ErrUnavailable, "%s with the server down", op)
		assert.NoError(t, ctxErr, "%s with the server down took %v: it must fail within its ctx", op, took)
		var opErr *net.OpError
		if !errors.As(err, &opErr) {
			t.Errorf("%s error %v: the network error is not reachable with errors.As", op, err)
		}
		var de *distlock.Error
		if !errors.As(err, &de) || de.Backend != "redis" {
			t.Errorf("%s error %v is not a *distlock.Error from redis", op, err)
		}
	}
	require.NoError(t, srv.Restart(ctx))
	select {
	case <-held.Done():
		assert.ErrorIs(t, held.Err(), distlock.ErrLockLost, "held lease ended")
	case <-time.After(10 * time.Second):
		t.Fatal("held lease still open 10s after a restart that lost its lock")
	}
	var lease *distlock.Lease
	eventually(t, 10*time.Second, "acquire after restart", func() bool {
		lease, err = other.TryAcquire(ctx, "killed")
		return err == nil
	})
	require.NoError(t, lease.Release(ctx))
}

// TestServerPaused: a stopped (SIGSTOP) server makes TryAcquire return with
// its context, not hang.
func TestServerPaused(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	if !srv.Controllable() {
		t.Skip("external server")
	}
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	require.NoError(t, l.client.Ping(t.Context()).Err())
	require.NoError(t, srv.Pause())
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
	require.NoError(t, err)
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	l, err := distlock.Open(t.Context(), "redis://"+addr+"/0?dial_timeout=1s")
	require.NoError(t, err, "Open is lazy, want no error for an unreachable server")
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err = l.Acquire(ctx, "k")
	if !errors.Is(err, distlock.ErrUnavailable) || ctx.Err() != nil {
		t.Errorf("Acquire on an unreachable server = %v after %v, want ErrUnavailable within its ctx", err, time.Since(start))
	}
}

// TestDownServerReportedPromptly: a Locker opened by URL reports a server
// that refuses connections as ErrUnavailable well within a short ctx, for
// the plain and the fair mode. go-redis's default dial retries (5 dials,
// 100ms apart, in each of its 4 attempts: 1.6s of backoff alone) made a
// 2s ctx end first on a loaded machine, with a bare deadline error.
func TestDownServerReportedPromptly(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	ls := map[string]*distlock.Locker{}
	for _, q := range []string{"", "fair=true"} {
		l, err := distlock.Open(t.Context(), "redis://"+srv.Addr()+"/0?"+q)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		lease, err := l.TryAcquire(t.Context(), "down") // connected
		require.NoError(t, err)
		require.NoError(t, lease.Release(t.Context()))
		ls[q] = l
	}
	require.NoError(t, srv.Kill())
	for q, l := range ls {
		for i := range 2 { // a stale pooled connection, then fresh dials
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			start := time.Now()
			_, err := l.Acquire(ctx, "down")
			cancel()
			if took := time.Since(start); !errors.Is(err, distlock.ErrUnavailable) || took > slack.D(time.Second) {
				t.Errorf("%q, attempt %d: Acquire with the server down: %v after %v, want ErrUnavailable within %v", q, i, err, took, slack.D(time.Second))
			}
		}
	}
}
