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

// rideOutOutages runs attempt until it succeeds or fails for another
// reason than a transient outage, when the acquisition's options ask for it
// (WithRetryUnavailable); otherwise it runs attempt once.
func (l *locker) rideOutOutages(ctx context.Context, opts []Option, attempt func() (*Lease, error)) (*Lease, error) {
	s := defaultSettings()
	for _, o := range l.defaults {
		o(&s)
	}
	for _, o := range opts {
		o(&s)
	}
	for n := 1; ; n++ {
		lease, err := attempt()
		if err == nil || !s.retryUnavailable || s.err != nil || ctx.Err() != nil || !transient(err) {
			return lease, err
		}
		t := time.NewTimer(s.retry.Delay(n))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-l.closeCtx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
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
