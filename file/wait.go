//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package file

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
)

// waiter paces the failed attempts of one Acquire: it sleeps until a
// wake-up (hub.go), then lets the caller try at once and again after 1ms,
// 4ms, 16ms ... up to pollMax: a dead holder's descriptor is closed (the
// event) an instant before the kernel drops its lock, and without kernel
// events the poll is all there is.
type waiter struct {
	d     *driver
	timer *time.Timer
	delay time.Duration
}

// sleep returns nil when it is time to try again, errAgain when interrupt
// fires, and the Acquire's error when ctx ends or the driver closes.
func (w *waiter) sleep(ctx context.Context, sig, interrupt <-chan struct{}) error {
	if w.timer == nil {
		w.timer = time.NewTimer(time.Millisecond)
	} else {
		w.timer.Reset(max(w.delay, time.Millisecond))
	}
	select {
	case <-sig:
		w.delay = 0
		w.timer.Stop()
		return nil
	case <-w.timer.C:
		w.delay = min(max(4*w.delay, time.Millisecond), w.d.pollMax())
		return nil
	case <-interrupt:
		return errAgain
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", backend.ErrNotAcquired, async.CtxError(ctx))
	case <-w.d.ctx.Done():
		return backend.ErrClosed
	}
}

// take waits for turn t, as sleep waits (but with no poll: the waiter
// with the turn hands it on when it leaves).
func (w *waiter) take(ctx context.Context, t *turn, interrupt <-chan struct{}) error {
	select {
	case t.ch <- struct{}{}:
		return nil
	case <-interrupt:
		return errAgain
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", backend.ErrNotAcquired, async.CtxError(ctx))
	case <-w.d.ctx.Done():
		return backend.ErrClosed
	}
}

// stop releases the timer.
func (w *waiter) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}
