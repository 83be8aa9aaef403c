package redislua

import (
	"context"
	"errors"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/natbatch"
)

// Batch is natural batching of the script calls of many goroutines to one
// server (or, over a ClusterClient, one pipeline split per node): while a
// request is in flight, the next ones queue, and the moment it is answered
// every queued request goes out together as one pipeline (one write, one
// read, one wake-up of the server). A lone request is never delayed: no
// timer, no linger. Per-request ctx semantics are exact: a request whose
// ctx ends while it is queued is never sent (its error is not Ambiguous);
// one already sent is abandoned (the caller returns at once) and its late
// handler receives the answer, so that the caller's driver can undo it.
// Safe for concurrent use.
type Batch struct {
	c       Client
	patient bool // see NewPatientBatch
	q       *natbatch.Queue[*call]
}

// Client is what a Batch needs of a go-redis client: every client type
// (Client, ClusterClient, Ring, a failover client) has it.
type Client interface {
	goredis.Scripter
	Process(ctx context.Context, cmd goredis.Cmder) error
	Pipeline() goredis.Pipeliner
}

// NewBatch returns the Batch of client c. Its flushes run on g (whose Close
// waits for them); while g is closing, they run on the caller's goroutine.
func NewBatch(c Client, g *async.Group) *Batch { return newBatch(c, g, false) }

// NewPatientBatch is NewBatch for callers that run on goroutines of their
// own and wait for the answer anyway (Redlock's per-node calls, whose
// caller stops waiting for them at its own ctx end): a request finding the
// connection free is sent on the caller's goroutine whatever its ctx, and
// once sent it is never abandoned (late is not called); a queued request is
// still dropped, never sent, when its ctx ends.
func NewPatientBatch(c Client, g *async.Group) *Batch { return newBatch(c, g, true) }

func newBatch(c Client, g *async.Group, patient bool) *Batch {
	b := &Batch{c: c, patient: patient}
	b.q = natbatch.New(g, 0, b.send, func(c *call) {
		if c.late != nil {
			c.late(c.cmd)
		}
	})
	return b
}

// Stats returns the round trips sent (a single call or a pipeline each)
// and the requests they carried.
func (b *Batch) Stats() (roundTrips, requests uint64) { return b.q.Stats() }

// Pending returns the number of requests queued behind the one in flight
// (for tests and diagnostics).
func (b *Batch) Pending() int { return b.q.Pending() }

// call is one request in a Batch.
type call struct {
	natbatch.Req
	ctx  context.Context
	s    *goredis.Script
	keys []string
	args []any
	r    *callArgs // nil, or the callArgs keys and args are in
	late func(*goredis.Cmd)
	cmd  *goredis.Cmd
}

// notSent is the error of a request whose ctx ended while it was queued:
// ctx's error (async.CtxError), and not Ambiguous — nothing reached the
// server, nothing is to be undone.
type notSent struct{ err error }

func (e *notSent) Error() string { return e.err.Error() }
func (e *notSent) Unwrap() error { return e.err }

// NotSent reports whether err is the error of a request that a Batch
// dropped because its ctx ended while it was queued.
func NotSent(err error) bool {
	var ns *notSent
	return errors.As(err, &ns)
}

// Do runs script s with keys and args through b and returns its reply. If
// ctx ends first, Do returns async.CtxError(ctx) at once: wrapped so that
// Ambiguous is false when the request was still queued (never sent), and
// with abandoned set when it had been sent; late, if not nil, then
// receives the reply when it arrives, on the flushing goroutine (start
// undo work from there with GoChild). A ctx that can never end sends a
// lone request on the caller's goroutine.
func (b *Batch) Do(ctx context.Context, s *goredis.Script, keys []string, args []any, late func(*goredis.Cmd)) (cmd *goredis.Cmd, abandoned bool, err error) {
	return b.do(ctx, s, keys, args, nil, late)
}

// do is Do for a call whose keys and args are r's (r nil: they are
// not), so that its EVALSHA command is built in r when they are in place.
func (b *Batch) do(ctx context.Context, s *goredis.Script, keys []string, args []any, r *callArgs, late func(*goredis.Cmd)) (cmd *goredis.Cmd, abandoned bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, &notSent{async.CtxError(ctx)}
	}
	if (ctx.Done() == nil || b.patient) && b.q.Own() {
		// Free, and the caller need not be interrupted: it sends its own
		// request, without a hop to another goroutine. Deferred: a panic
		// in the send (a client hook's) that the caller recovers must not
		// leave the queue busy for ever.
		defer b.q.Next()
		return b.run(ctx, s, keys, args, r), false, nil
	}
	c := &call{ctx: ctx, s: s, keys: keys, args: args, r: r, late: late}
	b.q.Push(c)
	switch b.q.Wait(ctx, c, !b.patient) {
	case natbatch.Dropped:
		return nil, false, &notSent{async.CtxError(ctx)}
	case natbatch.Abandoned:
		return nil, true, async.CtxError(ctx)
	}
	return c.cmd, false, nil
}

// send runs calls in one round trip: one call as Script.Run does it
// (EVALSHA, EVAL on NOSCRIPT), several as a pipeline of EVALSHA followed,
// for those that got NOSCRIPT (after a restart or SCRIPT FLUSH), by a
// pipeline of EVAL.
func (b *Batch) send(calls []*call) {
	ctx := batchContext(calls)
	if len(calls) == 1 {
		c := calls[0]
		c.cmd = b.run(ctx, c.s, c.keys, c.args, c.r)
		return
	}
	pipe := b.c.Pipeline()
	for _, c := range calls {
		c.cmd = evalSha(ctx, c.s, c.keys, c.args, c.r)
		_ = pipe.Process(ctx, c.cmd)
	}
	_, _ = pipe.Exec(ctx) // per-command errors are read by the callers
	var retry goredis.Pipeliner
	for _, c := range calls {
		if isNoScript(c.cmd.Err()) {
			if retry == nil {
				retry = b.c.Pipeline()
			}
			c.cmd = c.s.Eval(ctx, retry, c.keys, c.args...)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
}

// run sends one script call as Script.Run does (EVALSHA, EVAL on NOSCRIPT),
// with the cheaper command of evalSha.
func (b *Batch) run(ctx context.Context, s *goredis.Script, keys []string, args []any, r *callArgs) *goredis.Cmd {
	cmd := evalSha(ctx, s, keys, args, r)
	if err := b.c.Process(ctx, cmd); isNoScript(err) {
		return s.Eval(ctx, b.c, keys, args...)
	}
	return cmd
}

// shas holds each script's SHA1 as an interface value made once, so that
// a call does not box it again.
var shas sync.Map // *goredis.Script → any

// evalSha is the EVALSHA command of a call of s, built with no
// allocation besides the Cmd in r when r holds keys and args in place
// (callArgs.in), else with one (go-redis's own boxes the command name, the
// SHA1 and every key): keys are passed by pointer, which the client writes
// and routes (Cluster) as the strings they point to. keys must not change
// until the command has been sent.
func evalSha(ctx context.Context, s *goredis.Script, keys []string, args []any, r *callArgs) *goredis.Cmd {
	sha, ok := shas.Load(s)
	if !ok {
		sha, _ = shas.LoadOrStore(s, any(s.Hash()))
	}
	a := r.line() // args are in place already, after the keys
	if a == nil {
		a = make([]any, 3+len(keys)+len(args))
		copy(a[3+len(keys):], args)
	}
	a[0], a[1], a[2] = "evalsha", sha, len(keys)
	for i := range keys {
		a[3+i] = &keys[i]
	}
	cmd := goredis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// batchContext is the context of a round trip sent for its callers: not
// cancelled by any of them (a caller who gave up after it was sent gets
// the answer through late, and the others still wait for theirs), with the
// latest of the callers' deadlines when every caller has one (so that a
// client with ContextTimeoutEnabled bounds the socket I/O by it), else
// none (the client's read and write timeouts bound it).
func batchContext(calls []*call) context.Context {
	var (
		latest time.Time
		from   context.Context
	)
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.Background()
		}
		if from == nil || d.After(latest) {
			latest, from = d, c.ctx
		}
	}
	return uncancelled{from}
}

// uncancelled is a context's values and deadline without its
// cancellation.
type uncancelled struct{ context.Context }

func (uncancelled) Done() <-chan struct{} { return nil }
func (uncancelled) Err() error            { return nil }

// via runs one script call through b and parses its reply: Do for the
// driver-level operations below (r: see do).
func via[T any](ctx context.Context, b *Batch, s *goredis.Script, keys []string, args []any, r *callArgs, parse func(*goredis.Cmd) (T, error), late func(T, error)) (T, bool, error) {
	var lc func(*goredis.Cmd)
	if late != nil {
		lc = func(cmd *goredis.Cmd) { late(parse(cmd)) }
	}
	cmd, abandoned, err := b.do(ctx, s, keys, args, r, lc)
	if err != nil {
		var zero T
		return zero, abandoned, err
	}
	v, err := parse(cmd)
	return v, false, err
}

// Acquire is the package's Acquire through b (see Do for ctx, abandoned
// and late).
func (b *Batch) Acquire(ctx context.Context, k Keys, owner, hold, metadata string, ttl time.Duration, late func(AcquireResult, error)) (AcquireResult, bool, error) {
	return b.acquire(ctx, k, owner, hold, metadata, ttl, false, late)
}

// AcquireWaited is Acquire for a caller whose Locker has other waiters of
// the lock: a lock it takes, or nests into (its owner held it already,
// perhaps from another process that did not mark it), is marked for them
// at once (field w), so that
// its release wakes them although they have not attempted against it (a
// woken waiter that acquires hands no wake-up on: backend.HeldNotifier).
func (b *Batch) AcquireWaited(ctx context.Context, k Keys, owner, hold, metadata string, ttl time.Duration, late func(AcquireResult, error)) (AcquireResult, bool, error) {
	return b.acquire(ctx, k, owner, hold, metadata, ttl, true, late)
}

func (b *Batch) acquire(ctx context.Context, k Keys, owner, hold, metadata string, ttl time.Duration, waited bool, late func(AcquireResult, error)) (AcquireResult, bool, error) {
	r, err := acquireCall(k, owner, hold, metadata, ttl, waited)
	if err != nil {
		return AcquireResult{}, false, err
	}
	return via(ctx, b, acquireScript, r.keys, r.args, r, parseAcquireCmd, late)
}

// FairAcquire is the package's FairAcquire through b (see Do).
func (b *Batch) FairAcquire(ctx context.Context, k Keys, owner string, ttl time.Duration, a FairAttempt, late func(AcquireResult, error)) (AcquireResult, bool, error) {
	keys, args, err := fairAcquireCall(k, owner, ttl, a)
	if err != nil {
		return AcquireResult{}, false, err
	}
	return via(ctx, b, fairAcquireScript, keys, args, nil, parseFairAcquireCmd, late)
}

// Release is the package's Release through b (see Do).
func (b *Batch) Release(ctx context.Context, k Keys, owner string, token uint64, hold string, late func(ReleaseResult, error)) (ReleaseResult, bool, error) {
	s, r, err := releaseCall(k, owner, token, hold)
	if err != nil {
		return NotHeld, false, err
	}
	return via(ctx, b, s, r.keys, r.args, r, parseReleaseCmd, late)
}

// Refresh is the package's Refresh through b (see Do); an abandoned
// refresh needs no undo, so it takes no late handler.
func (b *Batch) Refresh(ctx context.Context, k Keys, owner string, token uint64, hold string, ttl time.Duration) (bool, error) {
	r, err := refreshCall(k, owner, token, hold, ttl)
	if err != nil {
		return false, err
	}
	held, _, err := via(ctx, b, refreshScript, r.keys, r.args, r, parseRefreshCmd, nil)
	return held, err
}
