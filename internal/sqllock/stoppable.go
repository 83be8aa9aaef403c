package sqllock

import (
	"context"
	"sync"
	"time"
)

// Stoppable runs a statement that may wait for a lock inside the server.
// run's ctx does not end with ctx: the client would break the connection,
// and the server would leave the orphaned statement queued for the lock.
// Instead, when ctx ends or limit (if positive) passes, stop is called to
// end the statement in the server (KILL QUERY, a cancel request); it calls
// abort to break the connection when it cannot. With grace > 0, a
// statement still running grace after stop returned is aborted too.
// timedOut reports that limit stopped it. After a stop the caller must
// discard the connection.
func Stoppable(ctx context.Context, limit, grace time.Duration, stop func(abort func()), run func(ctx context.Context) error) (timedOut bool, err error) {
	qctx, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	var timer <-chan time.Time
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		timer = t.C
	}
	done := make(chan struct{})
	var watcher sync.WaitGroup
	var fired bool
	watcher.Go(func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		case <-timer:
			fired = true
		}
		stop(abort)
		if grace <= 0 {
			return
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			abort()
		}
	})
	err = run(qctx)
	close(done)
	watcher.Wait()
	return fired, err
}
