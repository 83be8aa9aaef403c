package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/redisscript"
)

// The fair queue's timing: a waiter's entry lives queueTTL after its last
// attempt, and a waiter attempts at least every queueRenew, so an entry
// outlives its waiter (a crash, a pause) by at most queueTTL.
const (
	queueTTL   = 3 * time.Second
	queueRenew = time.Second
)

// fairDriver is the driver of a Locker made WithFair: its waiters queue in
// Redis (redisscript.FairAcquire) and are handed the lock by the release.
type fairDriver struct{ *driver }

var (
	_ backend.Blocker = (*fairDriver)(nil)
	_ backend.Issued  = (*lock)(nil)
)

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
	d := f.driver
	k := d.keys(req.Key)
	hold := d.holds.Next()
	var (
		wake       = make(chan struct{}, 1)
		grants     = make(chan redisscript.GrantMessage, 1)
		subscribed bool
		timer      *time.Timer
		sent       [2]time.Time // the send times of the last two attempts, by parity
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	granted := func(token uint64, at time.Time) backend.Lock {
		return &lock{d: d, keys: k, owner: req.Owner, hold: hold, token: token, issued: at}
	}
	for n := uint64(1); ; n++ {
		sent[n%2] = time.Now()
		a := redisscript.FairAttempt{Hold: hold, N: n, Enqueue: true, QueueTTL: queueTTL}
		r, err := d.attempt(ctx, k, req, func(ctx context.Context) (redisscript.AcquireResult, error) {
			return redisscript.FairAcquire(ctx, d.client, k, req.Owner, req.TTL, a)
		}, hold)
		if err != nil {
			if n > 1 {
				// An earlier attempt queued it, and this one may still
				// land: leave, on the in-flight schedule.
				d.bg.Leave(d.client, k, req.Owner, hold, true, false)
			}
			return nil, err
		}
		switch r.Outcome {
		case redisscript.Acquired, redisscript.Reentered:
			return granted(r.Token, sent[n%2]), nil
		case redisscript.Granted:
			// Granted with TTL before this attempt reached the server, of
			// which PTTL is left.
			return granted(r.Token, sent[n%2].Add(r.PTTL-req.TTL)), nil
		}
		if !subscribed {
			// At most queueRenew, so that with the pause below the queue
			// entry is renewed within 2×queueRenew < queueTTL; a failed
			// subscription is tried again on the next turn.
			wctx, cancel := context.WithTimeout(ctx, queueRenew)
			ok, unwatch := d.sub.WatchGrant(wctx, k.Channel, hold, wake, grants)
			cancel()
			if ok {
				subscribed = true
				defer unwatch()
				continue // attempt again: a grant published before the subscription is not missed
			}
		}
		pause := queueRenew
		if !subscribed {
			// Polling: notice a grant well within its TTL.
			pause = min(pause, req.TTL/3)
		}
		if r.PTTL > 0 {
			pause = min(pause, r.PTTL+time.Millisecond)
		}
		if timer == nil {
			timer = time.NewTimer(pause)
		} else {
			timer.Reset(pause)
		}
		select {
		case <-ctx.Done():
			d.bg.Leave(d.client, k, req.Owner, hold, false, false)
			return nil, fmt.Errorf("%w: %w", backend.Busy(r.PTTL), context.Cause(ctx))
		case <-timer.C:
		case <-wake:
			timer.Stop()
		case msg := <-grants:
			timer.Stop()
			g, ok := redisscript.ParseGrant(msg.Payload)
			if ok && g.Hold == hold && g.Attempt <= n && g.Attempt+1 >= n {
				// The server granted it Elapsed after it processed
				// attempt g.Attempt, sent at sent[g.Attempt%2]: a lower
				// bound of the grant time in this clock, less 1% for
				// clock-rate drift, and never later than the message's
				// arrival (which bounds a step of the server's clock).
				at := sent[g.Attempt%2].Add(g.Elapsed - g.Elapsed/100)
				if at.After(msg.Received) {
					at = msg.Received
				}
				return granted(g.Token, at), nil
			}
			// Not usable: the next attempt reports the grant.
		}
	}
}
