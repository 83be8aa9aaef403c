package distlock

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/distlock/distlock/backend"
)

// rideOutOutages runs the acquisition until it succeeds or fails for
// another reason than a transient outage, when its options ask for it
// (WithRetryUnavailable, Acquire only); otherwise it runs it once. It
// returns the attempts made in all. Each run after the first gets a fresh
// owner id unless the caller chose one: an earlier run's request may still
// land, and must stay a stranger to this one (it is undone by its driver).
func (l *locker) rideOutOutages(ctx context.Context, op string, r *request, wait bool) (*Lease, int, error) {
	total := 0
	for n := 1; ; n++ {
		lease, attempts, err := l.attempt(ctx, op, r, wait)
		total += attempts
		if err == nil || !wait || !r.retryUnavailable || ctx.Err() != nil || !transient(err) {
			return lease, total, err
		}
		t := time.NewTimer(r.retry.Delay(n))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, total, err
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

// transient reports whether err is an unavailability that may pass by
// itself: it wraps ErrUnavailable, is not an authentication or TLS error,
// and comes from the network (refused, reset, timed out, closed) or from a
// server that is starting or failing over (LOADING, READONLY, MASTERDOWN,
// TRYAGAIN, CLUSTERDOWN, BUSY), or is a lost quorum of such node errors.
// WithRetryUnavailable retries exactly these.
func transient(err error) bool {
	if !errors.Is(err, ErrUnavailable) || authOrTLS(err) {
		return false
	}
	var (
		ne  net.Error
		dns *net.DNSError
	)
	if errors.As(err, &dns) && dns.IsNotFound {
		return false // a misspelt host name, not an outage
	}
	if backend.IsTransient(err) {
		return true // the driver's classifier said so
	}
	switch {
	case errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, context.DeadlineExceeded):
		return true
	}
	msg := err.Error()
	for _, m := range []string{"LOADING ", "READONLY ", "MASTERDOWN ", "TRYAGAIN ", "CLUSTERDOWN ", "BUSY ",
		"zk: could not connect", "zk: connection closed", "zk: no server", "connection refused", "i/o timeout"} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// authOrTLS reports whether err, or any error it wraps or joins, is one that
// waiting cannot cure: the server refused our credentials, or the TLS
// handshake or certificate check failed.
func authOrTLS(err error) bool {
	var (
		rh  tls.RecordHeaderError
		ae  *tls.AlertError
		cv  *tls.CertificateVerificationError
		ua  x509.UnknownAuthorityError
		hn  x509.HostnameError
		cie x509.CertificateInvalidError
	)
	if errors.As(err, &rh) || errors.As(err, &ae) || errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &cie) {
		return true
	}
	msg := err.Error()
	for _, m := range []string{"WRONGPASS", "NOAUTH", "NOPERM", "invalid password", "Access denied", "zk: not authenticated", "tls: ", "TLS handshake"} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}
