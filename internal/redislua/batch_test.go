package redislua

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// batchServer is a redis-server, a client for the batch and an admin
// client (CLIENT PAUSE, INFO).
func batchServer(t *testing.T) (c, admin *goredis.Client) {
	t.Helper()
	srv := testserver.Redis(t, testserver.RedisConfig{})
	c = goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	admin = goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close(); _ = admin.Close() })
	return c, admin
}

// pause stops the server from processing commands for d (CLIENT PAUSE ALL):
// a request sent meanwhile stays in flight, and the next ones queue.
func pause(t *testing.T, admin *goredis.Client, d time.Duration) {
	t.Helper()
	require.NoError(t, admin.Do(t.Context(), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err())
}

// until polls cond, bounded: false if it never held within 10s.
func until(cond func() bool) bool {
	for range 2000 {
		if cond() {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// evalCalls is the number of EVALSHA and EVAL the server ran.
func evalCalls(t *testing.T, admin *goredis.Client) int {
	return commandCalls(t, admin, "evalsha") + commandCalls(t, admin, "eval")
}

// TestBatchDropsCancelledQueued: a request whose ctx ends while it waits
// behind one in flight is never sent; its error is the ctx's, not
// Ambiguous, and NotSent.
func TestBatchDropsCancelledQueued(t *testing.T) {
	c, admin := batchServer(t)
	g := async.NewGroup()
	defer g.Close()
	b := NewBatch(c, g)
	holds := NewHoldSource()
	ka, kb := KeysFor("t:", "a"), KeysFor("t:", "b")
	require.NoError(t, acquireScript.Load(t.Context(), admin).Err())
	require.NoError(t, admin.ConfigResetStat(t.Context()).Err())

	pause(t, admin, 2*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, _, err := b.Acquire(ctx, ka, "A", holds.Next(), "", time.Minute, nil)
		first <- err
	}()
	if !until(func() bool { rt, _ := b.Stats(); return rt == 1 }) {
		t.Fatal("the first request was never sent")
	}
	bctx, bcancel := context.WithCancel(t.Context())
	second := make(chan error, 1)
	go func() {
		_, abandoned, err := b.Acquire(bctx, kb, "B", holds.Next(), "", time.Minute, func(AcquireResult, error) {
			t.Error("late called for a request that was never sent")
		})
		assert.False(t, abandoned, "a queued request reported abandoned (sent)")
		second <- err
	}()
	if !until(func() bool { return b.Pending() == 1 }) {
		t.Fatal("the second request did not queue")
	}
	bcancel()
	err := <-second
	if !NotSent(err) || Ambiguous(err) || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("cancelled queued request: err %v (NotSent %v, Ambiguous %v), want the ctx error, NotSent", err, NotSent(err), Ambiguous(err))
	}
	require.NoError(t, <-first, "the request in flight")
	if !until(func() bool { return b.Pending() == 0 && !b.isBusy() }) {
		t.Fatal("the batch stayed busy")
	}
	if n := evalCalls(t, admin); n != 1 {
		t.Errorf("server ran %d scripts, want 1 (the cancelled request must not be sent)", n)
	}
	if n := admin.Exists(t.Context(), kb.Lock).Val(); n != 0 {
		t.Error("the cancelled request's lock exists")
	}
	if rt, reqs := b.Stats(); rt != 1 || reqs != 1 {
		t.Errorf("stats %d round trips, %d requests; want 1, 1", rt, reqs)
	}
}

func (b *Batch) isBusy() bool { return b.q.Busy() }

// TestBatchAbandonedAfterSend: a request whose ctx ends after it was sent
// returns at once, abandoned, and late receives its reply.
func TestBatchAbandonedAfterSend(t *testing.T) {
	c, admin := batchServer(t)
	g := async.NewGroup()
	defer g.Close()
	b := NewBatch(c, g)
	k := KeysFor("t:", "late")
	pause(t, admin, time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	late := make(chan AcquireResult, 1)
	done := make(chan struct{})
	var (
		abandoned bool
		err       error
	)
	go func() {
		defer close(done)
		_, abandoned, err = b.Acquire(ctx, k, "A", NewHoldSource().Next(), "", time.Minute, func(r AcquireResult, err error) {
			assert.NoError(t, err, "late")
			late <- r
		})
	}()
	if !until(func() bool { rt, _ := b.Stats(); return rt == 1 }) {
		t.Fatal("never sent")
	}
	cancel()
	<-done
	if !abandoned || !Ambiguous(err) {
		t.Fatalf("abandoned %v err %v; want abandoned with an Ambiguous ctx error", abandoned, err)
	}
	select {
	case r := <-late:
		assert.Equal(t, Acquired, r.Outcome, "late got %+v, want Acquired", r)
	case <-time.After(10 * time.Second):
		t.Fatal("late never called")
	}
}

// TestBatchPipelines: concurrent requests share round trips (fewer
// round trips than requests), every one gets its own answer, a NOSCRIPT
// pipeline is retried with EVAL, and no goroutine outlives the group.
func TestBatchPipelines(t *testing.T) {
	c, admin := batchServer(t)
	base := runtime.NumGoroutine()
	g := async.NewGroup()
	b := NewBatch(c, g)
	holds := NewHoldSource()
	require.NoError(t, admin.ScriptFlush(t.Context()).Err())
	pause(t, admin, 300*time.Millisecond) // the first request waits in flight while the rest queue
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const workers, rounds = 64, 20
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				k := KeysFor("t:", fmt.Sprintf("k%d-%d", w, i))
				hold := holds.Next()
				r, _, err := b.Acquire(ctx, k, "A", hold, "", time.Minute, nil)
				if err != nil || r.Outcome != Acquired {
					t.Errorf("acquire %v: %+v, %v", k.Name, r, err)
					return
				}
				if held, err := b.Refresh(ctx, k, "A", r.Token, hold, 2*time.Minute); err != nil || !held {
					t.Errorf("refresh %v: %v, %v", k.Name, held, err)
					return
				}
				if rr, _, err := b.Release(ctx, k, "A", r.Token, hold, nil); err != nil || rr != Freed {
					t.Errorf("release %v: %v, %v", k.Name, rr, err)
					return
				}
			}
		})
	}
	wg.Wait()
	rt, reqs := b.Stats()
	t.Logf("%d requests in %d round trips", reqs, rt)
	assert.Equal(t, uint64(3*workers*rounds), reqs, "%d requests sent, want %d", reqs, 3*workers*rounds)
	if rt >= reqs {
		t.Errorf("%d round trips for %d requests: no batching", rt, reqs)
	}
	if left := admin.Keys(t.Context(), "t:{*").Val(); len(left) != 0 {
		t.Errorf("%d locks left after every release", len(left))
	}
	g.Close()
	if !until(func() bool { return runtime.NumGoroutine() <= base }) {
		t.Errorf("%d goroutines after Close, %d before", runtime.NumGoroutine(), base)
	}
}

// TestEvalShaAllocations: a script call is built with two allocations (the
// argument slice and the Cmd), however many keys it has, and with one (the
// Cmd) when it is built in its callArgs; go-redis's Script.Run made eleven
// for an acquire (the command name, the SHA1 and each key boxed again on
// every call).
func TestEvalShaAllocations(t *testing.T) {
	keys := []string{"lock", "fence", "legacy"}
	args := []any{"owner", 10000, "hold"}
	evalSha(t.Context(), acquireScript, keys, args, nil) // caches the boxed SHA1
	if n := testing.AllocsPerRun(100, func() { evalSha(t.Context(), acquireScript, keys, args, nil) }); n > 2 {
		t.Errorf("evalSha: %.0f allocations, want at most 2", n)
	}
	cmd := evalSha(t.Context(), acquireScript, keys, args, nil)
	if got := fmt.Sprint(cmd.Args()[:4]); !strings.Contains(got, acquireScript.Hash()) || cmd.Args()[2] != 3 {
		t.Errorf("evalSha args %s: want evalsha, the SHA1, 3 keys", got)
	}

	r, err := acquireCall(KeysFor("t:", "evalsha"), "owner", NewHoldSource().Next(), "meta", 10*time.Second, false)
	require.NoError(t, err)
	if n := testing.AllocsPerRun(100, func() { evalSha(t.Context(), acquireScript, r.keys, r.args, r) }); n > 1 {
		t.Errorf("evalSha in a callArgs: %.0f allocations, want at most 1", n)
	}
	inPlace := evalSha(t.Context(), acquireScript, r.keys, r.args, r).Args()
	built := evalSha(t.Context(), acquireScript, r.keys, r.args, nil).Args()
	require.Len(t, inPlace, 3+3+5)
	require.Equal(t, built, inPlace, "the same command line in place as built apart")
	require.Equal(t, &r.k[0], inPlace[3], "keys by pointer")
}

// panicHook panics in the next command the client processes while armed
// (a user's hook that panics, and a caller that recovers).
type panicHook struct{ armed atomic.Bool }

func (h *panicHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *panicHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if h.armed.CompareAndSwap(true, false) {
			panic("hook panics")
		}
		return next(ctx, cmd)
	}
}
func (h *panicHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestBatchPanicInOwnRequestFreesQueue: a panic while a lone request is
// sent on its caller's goroutine (a client hook's), recovered by the
// caller, must not leave the Batch busy for ever: the next request goes
// out and is answered.
func TestBatchPanicInOwnRequestFreesQueue(t *testing.T) {
	c, _ := batchServer(t)
	h := &panicHook{}
	c.AddHook(h)
	g := async.NewGroup()
	defer g.Close()
	b := NewBatch(c, g)
	holds := NewHoldSource()
	h.armed.Store(true)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the hook's panic did not reach the caller")
			}
		}()
		_, _, _ = b.Acquire(context.Background(), KeysFor("t:", "p1"), "A", holds.Next(), "", time.Minute, nil)
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	r, _, err := b.Acquire(ctx, KeysFor("t:", "p2"), "A", holds.Next(), "", time.Minute, nil)
	if err != nil || r.Outcome != Acquired {
		t.Fatalf("the request after a recovered panic: %+v, %v (busy %v)", r, err, b.isBusy())
	}
}
