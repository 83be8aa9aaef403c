package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
)

// session is one etcd lease shared by the Locker's locks and waiter keys.
// id, ttl and margin are fixed; the rest is guarded by driver.mu.
type session struct {
	id     clientv3.LeaseID
	ttl    time.Duration // granted by the cluster
	margin time.Duration

	contact time.Time // send time of the latest grant or keepalive answered with a live lease
	dead    bool
	deadCh  chan struct{}
	cause   error
}

// deadlineLocked is when the session's leases are declared lost unless a
// keepalive succeeds first: last contact + TTL − margin. The leader cannot
// expire the lease earlier: it renews it to a full TTL when it handles a
// keepalive, after that keepalive was sent.
func (s *session) deadlineLocked() time.Time { return s.contact.Add(s.ttl - s.margin) }

// current returns the live session, nil if there is none.
func (d *driver) current() *session {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur != nil && !d.cur.dead {
		return d.cur
	}
	return nil
}

// session returns the live session, granting a new lease if there is none
// (one grant at a time; others wait for it), bounded by ctx and the connect
// timeout.
func (d *driver) session(ctx context.Context) (*session, error) {
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, backend.ErrClosed
		}
		if s := d.cur; s != nil && !s.dead {
			d.mu.Unlock()
			return s, nil
		}
		if wait := d.granting; wait != nil {
			d.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, async.CtxError(ctx)
			}
		}
		done := make(chan struct{})
		d.granting = done
		d.mu.Unlock()
		s, err := d.grantLease(ctx)
		d.mu.Lock()
		d.granting = nil
		close(done)
		if err == nil {
			if d.closed {
				d.mu.Unlock()
				d.revokeBG(s)
				return nil, backend.ErrClosed
			}
			d.cur = s
		}
		d.mu.Unlock()
		if err != nil {
			return nil, err
		}
		d.bg.Go(func() { d.keepalive(s) })
		return s, nil
	}
}

// errNoSession: the cluster granted no lease within the connect timeout.
var errNoSession = errors.New("etcd: no session lease")

// grantLease asks the cluster for a new lease, sending the request again
// every createTry while no answer comes (a member paused or cut off, an
// election under way), within the connect timeout. A cluster of which no
// endpoint accepts connections fails it at once (reachable). A lease
// granted by a send whose answer was lost has no keys and expires after
// its TTL.
func (d *driver) grantLease(ctx context.Context) (*session, error) {
	gctx, cancel := context.WithTimeout(ctx, d.cfg.connectTimeout())
	defer cancel()
	var (
		resp *clientv3.LeaseGrantResponse
		sent time.Time
	)
	for {
		if err := d.reachable(gctx); err != nil {
			return nil, err
		}
		tctx, tcancel := context.WithTimeout(gctx, createTry)
		sent = time.Now()
		var err error
		resp, err = d.client.Grant(tctx, int64(d.cfg.sessionTTL/time.Second))
		timedOut := tctx.Err() != nil
		tcancel()
		if err == nil {
			break
		}
		switch {
		case ctx.Err() != nil:
			return nil, unreachable(ctx, err)
		case gctx.Err() != nil:
			// Not the ctx error of the connect timeout: the caller's
			// ctx has not ended, and the error is a transient outage.
			return nil, fmt.Errorf("%w within %v (endpoints %s): %v", errNoSession, d.cfg.connectTimeout(), strings.Join(d.client.Endpoints(), ","), err)
		case d.ctx.Err() != nil:
			return nil, errClosed
		case !timedOut && !d.resendable(err):
			return nil, fmt.Errorf("etcd: grant lease: %w", err)
		}
		if err := d.pause(gctx, 20*time.Millisecond); err != nil {
			continue // the cases above say which ctx ended
		}
	}
	ttl := time.Duration(resp.TTL) * time.Second
	return &session{id: resp.ID, ttl: ttl, margin: d.cfg.marginFor(ttl), contact: sent,
		deadCh: make(chan struct{})}, nil
}

// unreachable is the error of a request to the cluster that ctx cut short
// before any answer: ErrUnavailable with the client's error, and the ctx
// error saying why the wait ended.
func unreachable(ctx context.Context, err error) error {
	return fmt.Errorf("%w: etcd: %w: %w", backend.ErrUnavailable, err, async.CtxError(ctx))
}

// maxKeepalivesInFlight bounds the keepalives of one session awaiting an
// answer at once.
const maxKeepalivesInFlight = 4

// keepaliveResult is the outcome of one keepalive request.
type keepaliveResult struct {
	sent time.Time
	resp *clientv3.LeaseKeepAliveResponse
	err  error
}

// keepalive renews s's lease every third of its TTL after the send of the
// latest answered request, as etcd's own client does (sooner after a
// failure), with one KeepAliveOnce per round, and records the send time
// of each one answered with a live lease. A request
// waits for its answer until s's deadline: a slow answer still renews the
// session. One not answered within half a period gets another request
// alongside it (up to maxKeepalivesInFlight), which the client may route to
// another member, in case its member does not answer at all (paused, cut
// off). It declares s lost at its deadline, or at once when the cluster
// says the lease is gone, and returns when s ends or the driver closes.
func (d *driver) keepalive(s *session) {
	period := max(s.ttl/3, 100*time.Millisecond)
	results := make(chan keepaliveResult, maxKeepalivesInFlight)
	inFlight := 0
	ctx, cancel := context.WithCancel(d.ctx)
	defer cancel() // ends the requests still in flight
	// Rounds are timed from the send time of the latest answered request
	// (the grant's, first), as the session deadline is: a slow answer
	// brings the next request forward.
	d.mu.Lock()
	next := s.contact.Add(period)
	d.mu.Unlock()
	timer := time.NewTimer(max(time.Until(next), time.Millisecond))
	defer timer.Stop()
	schedule := func(at time.Time) {
		d.mu.Lock()
		at = minTime(at, s.deadlineLocked())
		d.mu.Unlock()
		next = at
		timer.Reset(max(time.Until(at), time.Millisecond))
	}
	for {
		select {
		case <-timer.C:
			d.mu.Lock()
			deadline := s.deadlineLocked()
			d.mu.Unlock()
			now := time.Now()
			if !now.Before(deadline) {
				d.sessionLost(s, fmt.Sprintf("no keepalive answered for %v (lease TTL %v − margin %v): the cluster may expire the lease at any moment",
					now.Sub(deadline.Add(s.margin-s.ttl)).Round(time.Millisecond), s.ttl, s.margin))
				return
			}
			if inFlight < maxKeepalivesInFlight {
				inFlight++
				d.sendKeepalive(ctx, s, deadline, results)
			}
			schedule(now.Add(period / 2)) // no answer by then: send another
		case r := <-results:
			inFlight--
			switch {
			case r.err == nil && r.resp.TTL > 0:
				d.mu.Lock()
				if r.sent.After(s.contact) {
					s.contact = r.sent
				}
				last := s.contact
				d.mu.Unlock()
				schedule(last.Add(period))
			case errors.Is(r.err, rpctypes.ErrLeaseNotFound) || r.err == nil:
				d.sessionLost(s, fmt.Sprintf("the cluster reports lease %x expired or revoked", int64(s.id)))
				return
			case ctx.Err() == nil:
				schedule(minTime(next, time.Now().Add(period/8)))
			}
		case <-s.deadCh:
			return
		case <-d.ctx.Done():
			return
		}
	}
}

// sendKeepalive sends one keepalive of s in the background, waiting for
// its answer until deadline (or ctx's end), and delivers its outcome on
// results, which has room for it.
func (d *driver) sendKeepalive(ctx context.Context, s *session, deadline time.Time, results chan<- keepaliveResult) {
	d.stats.keepalives.Add(1)
	sent := time.Now()
	kctx, cancel := context.WithDeadline(ctx, deadline)
	if !d.spawn(func() {
		defer cancel()
		resp, err := d.client.KeepAliveOnce(kctx, s.id)
		if h := d.cfg.hooks; h != nil && h.keepalive != nil {
			if herr := h.keepalive(); herr != nil {
				resp, err = nil, herr
			}
		}
		results <- keepaliveResult{sent: sent, resp: resp, err: err}
	}) {
		cancel()
		results <- keepaliveResult{sent: sent, err: errClosed}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// sessionLost declares s lost: every lock of the session ends with
// ErrLockLost (its Lost callbacks), waiters on it start over on a new
// session, and the lease is revoked in the background, in case the
// cluster still thinks it alive, so that the session's keys go at once.
func (d *driver) sessionLost(s *session, cause string) {
	if d.endSession(s, fmt.Errorf("%w: etcd session lease %x lost: %s", backend.ErrLockLost, int64(s.id), cause)) {
		d.stats.sessions.Add(1)
		d.revokeBG(s)
	}
}

// endSession marks s dead with cause (nil: the driver closed) and tells its
// locks; false if it was dead already.
func (d *driver) endSession(s *session, cause error) bool {
	d.mu.Lock()
	if s.dead {
		d.mu.Unlock()
		return false
	}
	s.dead = true
	s.cause = cause
	close(s.deadCh)
	var lost []func(error)
	for h := range d.hw.held.all() {
		if h.sess == s {
			lost = d.table.EndLocked(h, lost)
		}
	}
	if d.cur == s {
		d.cur = nil
	}
	d.mu.Unlock()
	if cause != nil {
		for _, f := range lost {
			f(cause)
		}
	}
	return true
}

// revokeBG revokes s's lease in the background until that succeeds, the
// cluster says it is gone, or the lease has surely expired.
func (d *driver) revokeBG(s *session) {
	d.spawn(func() {
		async.Retry{Schedule: async.Backoff{First: 50 * time.Millisecond, Max: time.Second}, Within: s.ttl, TryTimeout: time.Second}.
			Do(d.ctx, func(ctx context.Context) bool {
				_, err := d.client.Revoke(ctx, s.id)
				return err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound)
			})
	})
}

// sessionDead reports whether s has ended.
func (d *driver) sessionDead(s *session) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return s.dead
}
