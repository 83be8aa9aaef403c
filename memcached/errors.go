package memcached

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock/backend"
)

var _ backend.ErrorClassifier = (*driver)(nil)

// errOutOfMemory marks memcached's "SERVER_ERROR out of memory" (a server
// started with -M whose slab class is full).
var errOutOfMemory = errors.New("memcached is out of memory and may not evict (-M)")

// Reasons for ErrNotHeld.
var (
	errGone    = fmt.Errorf("%w: the lock expired or was evicted", backend.ErrNotHeld)
	errNotOurs = fmt.Errorf("%w: the lock is held by another owner or tenure", backend.ErrNotHeld)
)

// errCASConflicts ends an owner-checked read-modify-write that kept
// finding the item changed (only nested holds of one owner change it).
var errCASConflicts = fmt.Errorf("%w: compare-and-swap kept conflicting for %v (the owner's holds change too fast)", backend.ErrUnavailable, casWindow)

// errContention ends an acquisition whose compare-and-swap loop kept
// conflicting with the same owner's other holds for casWindow: transient,
// never "held by another owner".
var errContention = &backend.TransientError{Err: errors.New("contention on the lock item")}

// ErrorCode implements backend.ErrorClassifier for the errors the driver
// returns unwrapped: gomemcache's, the network's and memcached's replies.
//
//   - CodeTransient, which WithRetryUnavailable waits out: a refused, reset
//     or broken connection, an I/O or connect timeout (net.Error,
//     *memcache.ConnectTimeoutError, io.EOF), and memcached's "ERROR Too
//     many open connections" (its -c limit).
//   - CodeClosed: the Locker's own connections were closed by Close.
//   - CodeUnavailable, which waiting will not cure: "SERVER_ERROR out of
//     memory" (-M and a full slab class: locks are never evicted, so
//     memory comes back only as they are released), no servers
//     (memcache.ErrNoServers), an unknown host, and every other error or
//     unexpected reply of the server.
func (d *driver) ErrorCode(err error) backend.Code {
	switch {
	case errors.Is(err, errPoolClosed):
		return backend.CodeClosed
	case errors.Is(err, errOutOfMemory), isOOM(err):
		return backend.CodeUnavailable
	case transientError(err):
		return backend.CodeTransient
	}
	return backend.CodeUnavailable
}

// transientError reports whether err is an outage that may pass: the
// connection failed or timed out, or the server refused more connections.
func transientError(err error) bool {
	var (
		dns *net.DNSError
		ne  net.Error
		cte *memcache.ConnectTimeoutError
	)
	switch {
	case errors.As(err, &dns) && dns.IsNotFound:
		return false
	case errors.As(err, &ne), errors.As(err, &cte),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	return strings.Contains(err.Error(), "Too many open connections")
}

// shape gives an error of the client the driver's context before it
// leaves the driver: a refusal for lack of memory is marked errOutOfMemory.
// Everything else stays as it is, for distlock to classify (ErrorCode).
func shape(err error) error {
	if isOOM(err) && !errors.Is(err, errOutOfMemory) {
		return fmt.Errorf("%w: %w", errOutOfMemory, err)
	}
	return err
}

func isOOM(err error) bool {
	return err != nil && strings.Contains(err.Error(), "SERVER_ERROR out of memory")
}

// serverAnswered reports whether err is a reply from the server (so the
// request is known not to have been applied), as gomemcache reports
// SERVER_ERROR and CLIENT_ERROR replies only as text.
func serverAnswered(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "SERVER_ERROR") || strings.Contains(msg, "CLIENT_ERROR") ||
		strings.Contains(msg, "unexpected response line")
}

// ioError reports whether err is an I/O failure on a connection that was
// established: the request may have reached the server (its outcome is
// unknown), and a retry on a fresh connection may succeed. Failed dials,
// server replies and context ends are not.
func ioError(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case errors.Is(err, backend.ErrNotAcquired), errors.Is(err, backend.ErrNotHeld),
		errors.Is(err, backend.ErrInvalidOption), errors.Is(err, backend.ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, errPoolClosed),
		errors.Is(err, memcache.ErrCacheMiss), errors.Is(err, memcache.ErrCASConflict),
		errors.Is(err, memcache.ErrNotStored), errors.Is(err, memcache.ErrMalformedKey),
		errors.Is(err, memcache.ErrNoServers), errors.Is(err, memcache.ErrServerError):
		return false
	}
	var cte *memcache.ConnectTimeoutError
	if errors.As(err, &cte) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	var reply *errReply
	if errors.As(err, &reply) {
		return false
	}
	return !serverAnswered(err)
}

// freshRetry reports whether an operation that failed with err should run
// once more on fresh connections — after an I/O error, most likely on a
// pooled connection to a restarted server — and if so drops the idle ones.
func (d *driver) freshRetry(ctx context.Context, err error) bool {
	if !ioError(err) || ctx.Err() != nil {
		return false
	}
	d.flushIdle()
	return true
}

// flushIdle drops the idle connections after an I/O error: after a server
// restart every pooled connection is dead, and gomemcache would otherwise
// fail once on each of them.
func (d *driver) flushIdle() {
	_ = d.c.Close() // closes idle connections only; the client stays usable
	if d.raw != nil {
		d.raw.flush()
	}
}
