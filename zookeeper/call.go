package zookeeper

import (
	"context"
	"errors"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
)

// do sends fn on s's connection and returns its error, or the ctx error
// (ctxError) as soon as ctx ends: go-zookeeper's requests take no context,
// so the request runs on a goroutine of the driver's group (async.Call) and
// may outlive the caller. late, if set, receives the outcome of a request
// whose caller stopped waiting, so that it can undo what landed late.
// proves marks requests whose answer proves contact with the ensemble
// (Sync).
func (d *driver) do(ctx context.Context, s *session, proves bool, fn func(*zk.Conn) error, late func(error)) error {
	if ctx.Err() != nil {
		return ctxError(ctx, s.conn)
	}
	if d.g.Closing() {
		return backend.ErrClosed
	}
	var onLate func(struct{}, error)
	if late != nil {
		onLate = func(_ struct{}, err error) { late(err) }
	}
	before, sent := s.conn.SessionID(), time.Now()
	_, abandoned, err := async.Call(d.g, ctx, func(context.Context) (struct{}, error) {
		err := fn(s.conn)
		d.observe(s, before, sent, proves, err)
		return struct{}{}, err
	}, onLate)
	if abandoned || err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return ctxError(ctx, s.conn)
	}
	return err
}

// start sends the idempotent request fn at once, through retrying, and
// returns a wait for its outcome, for requests sent alongside others; the
// wait, like retrying, ends when ctx ends.
func (d *driver) start(ctx context.Context, s *session, fn func(*zk.Conn) error) (wait func() error) {
	res := make(chan error, 1)
	if !d.g.Go(func() { res <- d.retrying(ctx, s, fn) }) {
		res <- backend.ErrClosed
	}
	return func() error { return <-res }
}

// observe records contact proven by an answered Sync and reacts to a
// session the server declared expired.
func (d *driver) observe(s *session, before int64, sent time.Time, proves bool, err error) {
	if errors.Is(err, zk.ErrSessionExpired) {
		d.sessionLost(s, "the server reported the session expired")
		return
	}
	if proves && err == nil && before == s.id && s.conn.SessionID() == s.id {
		d.mu.Lock()
		if sent.After(s.contact) {
			s.contact = sent
		}
		d.mu.Unlock()
	}
}

// retrying runs an idempotent request, sending it again after a connection
// loss while the session lives, for at most the connect timeout from the
// first failure.
func (d *driver) retrying(ctx context.Context, s *session, fn func(*zk.Conn) error) error {
	return d.retry(ctx, s, false, fn)
}

// retry is retrying; proves marks requests whose answer proves contact
// with the ensemble (do).
func (d *driver) retry(ctx context.Context, s *session, proves bool, fn func(*zk.Conn) error) error {
	var firstFail time.Time
	pause := 20 * time.Millisecond
	for {
		err := d.do(ctx, s, proves, fn, nil)
		if !retryable(err) || d.sessionDead(s) {
			return err
		}
		now := time.Now()
		if firstFail.IsZero() {
			firstFail = now
		}
		if now.Sub(firstFail) >= d.connectWait(s.timeout) {
			return err
		}
		if err := d.pause(ctx, pause, func() error { return unreachable(ctx, err) }); err != nil {
			return err
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// pause waits dur before a try is made again: nil after dur, cut() if ctx
// ends first, ErrClosed if the driver closes first.
func (d *driver) pause(ctx context.Context, dur time.Duration, cut func() error) error {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return cut()
	case <-d.ctx.Done():
		return backend.ErrClosed
	}
}
