package async

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Call runs op so that the caller returns as soon as ctx ends, for clients
// that do not interrupt a request when its context ends (go-redis, a
// ZooKeeper call, gomemcache). op runs on a goroutine of g and receives
// ctx. If ctx ends first, Call returns CtxError(ctx) at once with abandoned
// set, and late, if not nil, receives op's result when it arrives, on op's
// goroutine (start undo work from there with GoChild). A ctx that can never
// end, or a group that is closing, runs op on the caller's goroutine.
func Call[T any](g *Group, ctx context.Context, op func(context.Context) (T, error), late func(T, error)) (v T, abandoned bool, err error) {
	if err := ctx.Err(); err != nil {
		return v, false, CtxError(ctx)
	}
	if ctx.Done() == nil {
		v, err = op(ctx)
		return v, false, err
	}
	type result struct {
		v   T
		err error
	}
	var state atomic.Int32 // 0 running, 1 result taken by the caller, 2 abandoned
	done := make(chan result, 1)
	if !g.Go(func() {
		v, err := op(ctx)
		if !state.CompareAndSwap(0, 1) && late != nil {
			late(v, err)
		}
		done <- result{v, err}
	}) {
		v, err = op(ctx) // closing: no more background work
		return v, false, err
	}
	select {
	case r := <-done:
		return r.v, false, r.err
	case <-ctx.Done():
		if state.CompareAndSwap(0, 2) {
			return v, true, CtxError(ctx)
		}
		r := <-done
		return r.v, false, r.err
	}
}

// CtxError is ctx's error, with its cause when that says more (such as
// distlock.ErrClosed when the Locker closes): errors.Is(CtxError(ctx),
// ctx.Err()) and errors.Is(CtxError(ctx), context.Cause(ctx)) hold. It is
// nil while ctx is live.
func CtxError(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}
