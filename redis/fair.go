package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/redissub"
)

// The fair queue's timing: a waiter's entry lives queueTTL after its last
// attempt, and a waiter attempts at least every queueRenew, so an entry
// outlives its waiter (a crash, a pause) by at most queueTTL.
const (
	queueTTL   = 3 * time.Second
	queueRenew = time.Second
)

// fairDriver is the driver of a Locker made WithFair: its waiters queue in
// Redis (redislua.FairAcquire) and are handed the lock by the release.
type fairDriver struct{ *driver }

var _ backend.Blocker = (*fairDriver)(nil)

func (f *fairDriver) Capabilities() backend.Capabilities {
	c := f.driver.Capabilities()
	c.Fair = true
	return c
}

// Acquire implements backend.Blocker: it joins the key's queue with its
// first attempt, subscribes to the key's channel, and then waits for its
// grant message (the lock is already held for it), a plain wake-up or its
// renewal timer (after either it attempts again, which also renews its
// queue entry and reports a grant whose message was lost), or the end of
// ctx (it leaves the queue, releasing the lock if it was granted meanwhile).
func (f *fairDriver) Acquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if req.Permits > 0 {
		return nil, backend.ErrSkip // permits are not queued: distlock waits on Watch
	}
	w := &fairWait{
		d: f.driver, req: req, k: f.keys(req.Key), hold: f.holds.Next(),
		wake: make(chan struct{}, 1), grants: make(chan redissub.GrantMessage, 1),
	}
	defer w.stop()
	granted := func(l backend.Lock, err error) (backend.Lock, error) {
		if l != nil {
			if err := f.confirmGrant(ctx, l.(*lock), req); err != nil {
				return nil, err
			}
		}
		return l, err
	}
	for n := uint64(1); ; n++ {
		r, l, err := w.attempt(ctx, n)
		if l != nil || err != nil {
			return granted(l, err)
		}
		if !w.subscribed && w.subscribe(ctx) {
			continue // attempt again: a grant published before the subscription is not missed
		}
		if l, err := w.wait(ctx, n, r); l != nil || err != nil {
			return granted(l, err)
		}
	}
}

// fairWait is one waiter of fairDriver.Acquire.
type fairWait struct {
	d      *driver
	req    backend.Request
	k      redislua.Keys
	hold   string
	wake   chan struct{}
	grants chan redissub.GrantMessage

	subscribed bool
	unwatch    func()
	timer      *time.Timer
	sent       [2]time.Time // the send times of the last two attempts, by parity
}

// stop ends the waiter's subscription and timer.
func (w *fairWait) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.unwatch != nil {
		w.unwatch()
	}
}

// granted is the lock granted to the waiter's hold with token, valid from at.
func (w *fairWait) granted(token uint64, at time.Time) backend.Lock {
	return &lock{d: w.d, keys: w.k, owner: w.req.Owner, hold: w.hold, token: token, issued: at}
}

// attempt makes attempt n: the lock if it is this waiter's now, else the
// busy outcome.
func (w *fairWait) attempt(ctx context.Context, n uint64) (redislua.AcquireResult, backend.Lock, error) {
	d := w.d
	w.sent[n%2] = time.Now()
	a := redislua.FairAttempt{Hold: w.hold, N: n, Enqueue: true, QueueTTL: queueTTL, Metadata: w.req.Metadata}
	r, err := d.attempt(ctx, w.k, w.req, w.hold, &a)
	if err != nil {
		if n > 1 {
			// An earlier attempt queued it, and this one may still
			// land: leave, on the in-flight schedule.
			d.bg.Leave(d.client, w.k, w.req.Owner, w.hold, true, false)
		}
		return r, nil, err
	}
	switch r.Outcome {
	case redislua.Acquired, redislua.Reentered:
		return r, w.granted(r.Token, w.sent[n%2]), nil
	case redislua.Granted:
		// Granted with TTL before this attempt reached the server, of
		// which PTTL is left.
		return r, w.granted(r.Token, w.sent[n%2].Add(r.PTTL-w.req.TTL)), nil
	}
	return r, nil, nil
}

// subscribe watches the key's channel for the waiter, for at most
// queueRenew, so that with the pause of wait the queue entry is renewed
// within 2×queueRenew < queueTTL; a failed subscription is tried again on
// the next turn.
func (w *fairWait) subscribe(ctx context.Context) bool {
	wctx, cancel := context.WithTimeout(ctx, queueRenew)
	ok, unwatch := w.d.sub.WatchGrant(wctx, w.k.Channel, w.hold, w.wake, w.grants)
	cancel()
	if ok {
		w.subscribed, w.unwatch = true, unwatch
	}
	return ok
}

// wait waits after the busy attempt n (r) for a grant message, a wake-up,
// the renewal timer or the end of ctx. It returns the lock of a usable
// grant, the error of ctx's end, or neither: attempt again.
func (w *fairWait) wait(ctx context.Context, n uint64, r redislua.AcquireResult) (backend.Lock, error) {
	pause := queueRenew
	if !w.subscribed {
		// Polling: notice a grant well within its TTL.
		pause = min(pause, w.req.TTL/3)
	}
	if r.PTTL > 0 {
		pause = min(pause, r.PTTL+time.Millisecond)
	}
	if w.timer == nil {
		w.timer = time.NewTimer(pause)
	} else {
		w.timer.Reset(pause)
	}
	select {
	case <-ctx.Done():
		w.d.bg.Leave(w.d.client, w.k, w.req.Owner, w.hold, false, false)
		return nil, fmt.Errorf("%w: %w", backend.Busy(r.PTTL), async.CtxError(ctx))
	case <-w.timer.C:
	case <-w.wake:
		w.timer.Stop()
	case msg := <-w.grants:
		w.timer.Stop()
		return w.fromGrant(msg, n), nil
	}
	return nil, nil
}

// fromGrant is the lock a grant message gives, or nil if it is not usable
// (the next attempt then reports the grant).
func (w *fairWait) fromGrant(msg redissub.GrantMessage, n uint64) backend.Lock {
	g, ok := redislua.ParseGrant(msg.Payload)
	if !ok || g.Hold != w.hold || g.Attempt > n || g.Attempt+1 < n {
		return nil
	}
	// The server granted it Elapsed after it processed attempt g.Attempt,
	// sent at sent[g.Attempt%2]: a lower bound of the grant time in this
	// clock, less 1% for clock-rate drift, and never later than the
	// message's arrival (which bounds a step of the server's clock).
	at := w.sent[g.Attempt%2].Add(g.Elapsed - g.Elapsed/100)
	if at.After(msg.Received) {
		at = msg.Received
	}
	return w.granted(g.Token, at)
}
