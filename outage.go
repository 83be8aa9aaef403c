package distlock

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/distlock/distlock/backend"
)

// rideOutOutages runs the acquisition until it succeeds or fails for
// another reason than a transient outage, when its options ask for it
// (WithRetryUnavailable, Acquire only); otherwise it runs it once. It
// returns the attempts made in all. Each run after the first gets a fresh
// owner id unless the caller chose one: an earlier run's request may still
// land, and must stay a stranger to this one (it is undone by its driver).
// When ctx ends during the outage (in a pause, or cutting an attempt
// short before the backend answered), the error is outageEnded's: it
// carries the latest backend error as well as the ctx's end.
func (l *Locker) rideOutOutages(ctx context.Context, op string, r *request, wait bool) (*Lease, int, error) {
	total := 0
	var (
		cause error // the latest transient failure
		log   = outageLog{log: r.logger(), backend: l.name, key: r.key}
	)
	for n := 1; ; n++ {
		lease, attempts, err := l.attempt(ctx, op, r, wait)
		total += attempts
		if err != nil && cause != nil && ctx.Err() != nil && errors.Is(err, ErrUnavailable) {
			return nil, total, l.outageEnded(ctx, op, r.key, cause)
		}
		if cause != nil && (err == nil || !transient(err)) {
			log.over(n)
		}
		if err == nil || !wait || !r.retryUnavailable || ctx.Err() != nil || !transient(err) {
			return lease, total, err
		}
		log.failed(n, err)
		cause = err
		t := time.NewTimer(r.retry.Delay(n))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, total, l.outageEnded(ctx, op, r.key, cause)
		case <-l.closeCtx.Done():
			t.Stop()
			return nil, total, err
		case <-t.C:
		}
		if !r.sharedOwner {
			r.owner = newOwnerID()
		}
	}
}

// outageEnded is the error of an acquisition whose ctx ended while the
// backend was unavailable: ErrNotAcquired and the ctx error (as for any
// acquisition that ctx ended), with the latest attempt's backend error,
// which wraps ErrUnavailable, as its cause.
func (l *Locker) outageEnded(ctx context.Context, op, key string, cause error) error {
	var e *Error
	if errors.As(cause, &e) {
		cause = e.Err
	}
	return l.err(op, key, l.ctxError(ctx, cause))
}

// transient reports whether err is an unavailability that may pass by
// itself: the driver classified it so (backend.CodeTransient: a refused,
// reset or timed-out connection, a server loading or failing over, a lost
// quorum of such nodes; without a classifier, any network error) and it is
// not a host name that does not resolve. WithRetryUnavailable retries
// exactly these. The drivers recognise their clients' errors; this is the
// one decision made of them here.
func transient(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return false // a misspelt host name, not an outage
	}
	return errors.Is(err, ErrUnavailable) && backend.IsTransient(err)
}

// outageLogEvery is how often an Acquire waiting out an outage tells its
// logger that the outage goes on.
const outageLogEvery = 5 * time.Second

// outageLog tells an acquisition's logger (WithLogger) about an outage it
// waits out with WithRetryUnavailable: when it begins (Warn, with the
// backend's error), while it lasts (Info, every outageLogEvery), and when
// the backend answers again (Info). Without a logger it does nothing.
type outageLog struct {
	log          *slog.Logger
	backend, key string
	began, last  time.Time
}

// failed records that attempt n failed with the transient err.
func (o *outageLog) failed(n int, err error) {
	if o.log == nil {
		return
	}
	now := time.Now()
	switch {
	case o.began.IsZero():
		o.began, o.last = now, now
		o.log.Warn("distlock: backend unavailable, retrying until the wait ends", "backend", o.backend, "key", o.key, "err", err)
	case now.Sub(o.last) >= outageLogEvery:
		o.last = now
		o.log.Info("distlock: backend still unavailable, retrying", "backend", o.backend, "key", o.key,
			"for", now.Sub(o.began).Round(time.Millisecond), "attempts", n, "err", err)
	}
}

// over records that attempt n got an answer after the outage.
func (o *outageLog) over(n int) {
	if o.log == nil || o.began.IsZero() {
		return
	}
	o.log.Info("distlock: backend answers again", "backend", o.backend, "key", o.key,
		"after", time.Since(o.began).Round(time.Millisecond), "attempts", n)
}
