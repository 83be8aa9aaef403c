package sqllock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
)

// NetCode classifies the errors of the connection under a SQL client:
// refused, reset, closed or timed-out connections, and a connection the
// pool found broken, are CodeTransient; a host name that does not resolve
// is CodeUnavailable (waiting will not cure a misspelt name); anything else
// is CodeUnknown.
func NetCode(err error) backend.Code {
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return backend.CodeUnavailable
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed), errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone):
		return backend.CodeTransient
	}
	return backend.CodeUnknown
}

// NoAnswer is the error of a call to the server that the end of ctx cut
// off: the server did not answer in time (ErrUnavailable), because ctx
// ended (async.CtxError: its error and cause); the client's own error
// stays reachable with errors.As.
func NoAnswer(ctx context.Context, err error) error {
	cerr := async.CtxError(ctx)
	if err == nil || errors.Is(err, cerr) {
		return fmt.Errorf("%w: no answer before the context ended: %w", backend.ErrUnavailable, cerr)
	}
	return fmt.Errorf("%w: no answer before the context ended: %w (%w)", backend.ErrUnavailable, cerr, err)
}

// Failed returns the error of a call to the server as a driver returns it:
// cut off by the end of ctx (NoAnswer), or the client's error as it is, on
// one line, for the driver's ErrorCode to classify. nil stays nil.
func Failed(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	async.Settle(ctx, err)
	if ctx.Err() != nil {
		return NoAnswer(ctx, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// An inner bound of the driver's (not the caller's ctx) ran out:
		// the server did not answer in time.
		return backend.Wrap(backend.CodeTransient, backend.OneLine(err))
	}
	return backend.OneLine(err)
}

// WaitCut is the error of a wait for a lock that the end of ctx cut off:
// ErrNotAcquired with ctx's error (async.CtxError); the client's error, if
// any, stays reachable.
func WaitCut(ctx context.Context, err error) error {
	cerr := async.CtxError(ctx)
	if err == nil || errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", backend.ErrNotAcquired, cerr)
	}
	return fmt.Errorf("%w: %w (%w)", backend.ErrNotAcquired, cerr, backend.OneLine(err))
}

// Classify is what distlock's root does with a driver's error, for the
// driver's own methods that bypass it (Inspect): a ctx-caused error as
// NoAnswer, else err in the sentinel of code(err).
func Classify(ctx context.Context, err error, code func(error) backend.Code) error {
	if err == nil {
		return nil
	}
	if err = Failed(ctx, err); backend.IsTransient(err) || ctx.Err() != nil {
		return err
	}
	return backend.Wrap(code(err), err)
}

// OpenError is the error of the login check of a URL opener: refused
// credentials are ErrAuth and a missing database ErrMisconfigured (as code
// says); anything else that keeps the server from accepting us is
// ErrUnavailable — transient when code says so, else not — and a check
// cut off by ctx is NoAnswer.
func OpenError(ctx context.Context, err error, code func(error) backend.Code) error {
	if err = Failed(ctx, err); backend.IsTransient(err) || ctx.Err() != nil {
		return err
	}
	c := code(err)
	if c != backend.CodeTransient && c != backend.CodeAuth && c != backend.CodeMisconfigured {
		c = backend.CodeUnavailable
	}
	return backend.Wrap(c, backend.OneLine(err))
}
