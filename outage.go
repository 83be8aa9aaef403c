package distlock

import (
	"context"
	"errors"
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
func (l *locker) rideOutOutages(ctx context.Context, op string, r *request, wait bool) (*Lease, int, error) {
	total := 0
	var cause error // the latest transient failure
	for n := 1; ; n++ {
		lease, attempts, err := l.attempt(ctx, op, r, wait)
		total += attempts
		if err != nil && cause != nil && ctx.Err() != nil && errors.Is(err, ErrUnavailable) {
			return nil, total, l.outageEnded(ctx, op, r.key, cause)
		}
		if err == nil || !wait || !r.retryUnavailable || ctx.Err() != nil || !transient(err) {
			return lease, total, err
		}
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
func (l *locker) outageEnded(ctx context.Context, op, key string, cause error) error {
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
