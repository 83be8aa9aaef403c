package distlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock/backend"
)

// TryAcquire makes one attempt and returns ErrNotAcquired at once if
// another owner holds the lock.
func (l *Locker) TryAcquire(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, "try-acquire", key, opts, false)
}

// Acquire blocks until the lock named key is held, ctx ends, or the
// backend fails. When ctx ends first, the error satisfies both
// errors.Is(err, ErrNotAcquired) and errors.Is(err, ctx.Err()), and
// nothing is left behind in the backend.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, "acquire", key, opts, true)
}

func (l *Locker) acquire(ctx context.Context, op, key string, opts []Option, wait bool) (*Lease, error) {
	r, err := l.prepare(key, opts)
	if err != nil {
		return nil, l.err(op, key, err)
	}
	if r.observer() != nil {
		return l.observedAcquire(ctx, op, &r, wait)
	}
	lease, _, err := l.rideOutOutages(ctx, op, &r, wait)
	return lease, err
}

// observedAcquire is acquire with an Observer: AcquireStart, the
// acquisition on the ctx it returns, AcquireEnd, and only then a loss of
// the lease that raced with its grant.
func (l *Locker) observedAcquire(ctx context.Context, op string, r *request, wait bool) (*Lease, error) {
	ev := AcquireEvent{Backend: l.name, Key: r.key, Op: op}
	start := time.Now()
	obs := r.observer()
	ctx = obs.AcquireStart(ctx, ev)
	lease, attempts, err := l.rideOutOutages(ctx, op, r, wait)
	res := AcquireResult{AcquireEvent: ev, Owner: r.owner, Attempts: attempts, Waited: time.Since(start), Err: err}
	if lease != nil {
		res.Owner, res.Token = lease.owner, lease.token
	}
	obs.AcquireEnd(ctx, res)
	if lease != nil {
		lease.w.announced()
	}
	return lease, err
}

// attempt runs one acquisition: one try, or a wait until acquired. It
// returns the attempts made.
func (l *Locker) attempt(ctx context.Context, op string, r *request, wait bool) (*Lease, int, error) {
	key := r.key
	if err := l.begin(); err != nil {
		return nil, 0, l.err(op, key, err)
	}
	defer l.inflight.Done()
	lease := newLease(l, r)
	req := backend.Request{Key: key, Owner: r.owner, TTL: r.ttl, Metadata: r.metadata(), Lost: lease.backendLost}
	var (
		lock     backend.Lock
		sent     time.Time
		err      error
		attempts = 1
	)
	native := wait && l.blocker != nil
	if native {
		cctx, stop := l.closeAware(ctx)
		sent = time.Now()
		lock, err = l.blocker.Acquire(cctx, req)
		stop()
		native = err != backend.ErrSkip // bare, as database/sql's driver.ErrSkip
		if !native && lock != nil {
			// A lock along with ErrSkip breaks the Blocker contract
			// (ErrSkip comes before anything is sent): give it back, in
			// the background as below, rather than leave it held.
			l.inflight.Add(1)
			go func(lock backend.Lock) {
				defer l.inflight.Done()
				l.releaseQuietly(lock)
			}(lock)
		}
	}
	if wait && !native {
		lock, sent, attempts, err = l.waitLoop(ctx, req, r.retry, r.sharedOwner)
	} else if !wait {
		sent = time.Now()
		lock, err = l.drv.TryAcquire(ctx, req)
	}
	if err != nil {
		err = l.classify(err)
		if !native {
			err = noAnswer(ctx, err)
		}
		return nil, attempts, l.err(op, key, l.ctxError(ctx, err))
	}
	if is, ok := lock.(backend.Issued); ok {
		sent = is.IssuedAt()
	}
	if !lease.start(lock, sent, r.minHold()) {
		// Lost, late, or Close ran, between the grant and now: give the
		// lock back, in the background so that the caller need not wait
		// for a backend that may not answer. (Close waits for it, within
		// its bound: the Add happens while this call is counted.)
		l.inflight.Add(1)
		go func() {
			defer l.inflight.Done()
			l.releaseQuietly(lock)
		}()
		return nil, attempts, l.err(op, key, lease.Err())
	}
	l.owned.granted(key, r.owner)
	return lease, attempts, nil
}

// noAnswer marks an attempt that the caller's context cut off before the
// backend answered (a dial or a round trip still under way) as
// ErrUnavailable: the backend did not decide in time. A wait for a busy
// lock that ran out is not one (it stays ErrNotAcquired).
func noAnswer(ctx context.Context, err error) error {
	if ctx.Err() == nil || errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: no answer before the context ended: %w", ErrUnavailable, err)
}

// ctxError puts an error caused by the end of the caller's context, or by
// Close, into the documented form.
func (l *Locker) ctxError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		if !errors.Is(err, ctxErr) {
			err = fmt.Errorf("%w: %w", err, ctxErr)
		}
		if !errors.Is(err, ErrNotAcquired) {
			err = fmt.Errorf("%w: %w", ErrNotAcquired, err)
		}
		return err
	}
	if (errors.Is(err, context.Canceled) || errors.Is(err, ErrClosed)) && l.isClosed() {
		return ErrClosed
	}
	return err
}

// waitLoop retries TryAcquire until it succeeds, fails for another reason
// than a busy lock, or ctx ends. With a Notifier it subscribes after the
// first failed attempt and before the next, so no release is missed, and
// waits for the notification, for the holder's remaining time, or for the
// retry policy's delay as a fallback, whichever comes first. A wait that
// the fallback ends subscribes again (and tries once more) before the next
// wait, so a watch made while the notification channel was down is
// replaced within one fallback once the channel is back.
func (l *Locker) waitLoop(ctx context.Context, req backend.Request, policy RetryPolicy, sharedOwner bool) (lock backend.Lock, sent time.Time, attempts int, err error) {
	var (
		wake      <-chan struct{} // the backend's release notifications
		ownerWake <-chan struct{} // req.Owner granted req.Key in this Locker
		timer     *time.Timer
		unwatch   func(held bool) // ends the watch behind wake
		// unannounced: the Notifier does not announce releases for req
		unannounced bool
	)
	defer func() {
		if unwatch != nil {
			unwatch(err == nil)
		}
	}()
	if sharedOwner {
		// Registered before the first attempt, so that a grant to the
		// same owner after it is not missed. (A random owner is never
		// granted to anyone else: only WithOwner ids need this.)
		ch, cancel := l.owned.register(req.Key, req.Owner)
		defer cancel()
		ownerWake = ch
	}
	first := true
	var busy error // the last "held by another owner" answer
	for attempt := 0; ; attempt++ {
		sent = time.Now()
		lock, err = l.drv.TryAcquire(ctx, req)
		err = l.classify(err)
		if err == nil {
			if timer != nil {
				timer.Stop()
			}
			return lock, sent, attempt + 1, nil
		}
		if busy != nil && ctx.Err() != nil && !errors.Is(err, ErrNotAcquired) {
			// The wait ran out during an attempt: the lock was busy as
			// far as anyone knows, not the backend unavailable.
			return nil, sent, attempt + 1, fmt.Errorf("%w: %w", busy, context.Cause(ctx))
		}
		if !errors.Is(err, ErrNotAcquired) {
			return nil, sent, attempt + 1, err
		}
		busy = err
		if ctx.Err() != nil {
			// Ended (by the caller, or by Close) while the attempt was
			// answered: say why, as the wait below does.
			return nil, sent, attempt + 1, fmt.Errorf("%w: %w", err, context.Cause(ctx))
		}
		if first {
			// About to wait: let Close interrupt the wait. (Not before:
			// the uncontended path stays free of this cost.)
			first = false
			var stop func()
			ctx, stop = l.closeAware(ctx)
			defer stop()
		}
		if l.notifier != nil && wake == nil && !unannounced {
			wake, unwatch = l.watch(ctx, req)
			unannounced = wake == nil // not for this request: poll
			if !unannounced && ctx.Err() == nil {
				continue // subscribed: try once more so a release in between is not missed
			}
		}
		pause := policy.Delay(attempt + 1)
		var busy *backend.BusyError
		if errors.As(err, &busy) && busy.RetryAfter > 0 {
			if wake != nil {
				// With notifications the policy is only the fallback: the
				// holder's expiry is the longest we need to wait.
				pause = min(busy.RetryAfter+time.Millisecond, max(pause, notifyFallback))
			} else {
				pause = min(pause, busy.RetryAfter+time.Millisecond)
			}
		} else if wake != nil {
			pause = max(pause, notifyFallback)
		}
		if timer == nil {
			timer = time.NewTimer(pause)
		} else {
			timer.Reset(pause)
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, sent, attempt + 1, fmt.Errorf("%w: %w", err, context.Cause(ctx))
		case <-timer.C:
			if wake != nil {
				// No notification within the fallback: the watch may be
				// one made while the channel was down, which never fires.
				// Watch again, so that once the channel is back the wait
				// is notified again instead of polling at the fallback.
				unwatch(false)
				wake, unwatch = nil, nil
			}
		case <-wake:
			timer.Stop()
		case <-ownerWake:
			timer.Stop()
		}
	}
}

// watch is the Notifier's Watch of req, through WatchHeld where the driver
// has it: the cancel it returns is told whether the waiter leaves holding
// the lock. A nil channel (and cancel): releases of req are not announced;
// a cancel the driver returned with its nil channel is called at once.
func (l *Locker) watch(ctx context.Context, req backend.Request) (<-chan struct{}, func(held bool)) {
	if l.heldNotifier != nil {
		ch, cancel := l.heldNotifier.WatchHeld(ctx, req)
		if ch == nil {
			if cancel != nil {
				cancel(false)
			}
			return nil, nil
		}
		return ch, cancel
	}
	ch, cancel := l.notifier.Watch(ctx, req)
	if ch == nil {
		if cancel != nil {
			cancel()
		}
		return nil, nil
	}
	return ch, func(bool) { cancel() }
}

// notifyFallback is the longest a notified waiter sleeps without a message
// when the holder's remaining time is unknown.
const notifyFallback = time.Second
