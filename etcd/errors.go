package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
)

// Errors of the driver's own making. The driver returns the etcd client's
// errors as they are (or wrapped with context by %w); ErrorCode says what
// they mean, and package distlock wraps them once.
var (
	// errRestart: the session of the attempt was lost (or the attempt's
	// key vanished); nothing of the attempt is left behind and the
	// acquisition may start over on a new session.
	errRestart = errors.New("etcd: session lost during the attempt")
	// errClosed: the driver was closed during the call.
	errClosed = fmt.Errorf("etcd: %w", backend.ErrClosed)
)

// ErrorCode implements backend.ErrorClassifier. Refused credentials or
// permissions (etcdserver: permission denied, authentication failed,
// invalid auth token, user name is empty; gRPC PermissionDenied,
// Unauthenticated) are CodeAuth, and a request the server refuses as too
// large is CodeUnavailable: waiting will not cure them. A lost quorum or leader, a timeout (also the
// server's "context deadline exceeded" with code Unknown), an unreachable
// or closing connection (gRPC Unavailable, DeadlineExceeded, Aborted;
// etcdserver: no leader, request timed out, leader changed; no available
// endpoints), and the driver's own "session lost" and "no session lease"
// are CodeTransient. A client closed by its owner is CodeClosed.
func (d *driver) ErrorCode(err error) backend.Code {
	switch {
	case errors.Is(err, errRestart), errors.Is(err, errNoSession), errors.Is(err, clientv3.ErrNoAvailableEndpoints):
		return backend.CodeTransient
	case authRefused(err):
		return backend.CodeAuth
	case errors.Is(err, rpctypes.ErrRequestTooLarge):
		return backend.CodeUnavailable
	}
	if serverTimedOut(err) {
		return backend.CodeTransient
	}
	if code, ok := grpcCode(err); ok {
		switch code {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted:
			return backend.CodeTransient
		case codes.PermissionDenied, codes.Unauthenticated:
			return backend.CodeAuth
		case codes.Canceled:
			if d.client.Ctx().Err() != nil {
				return backend.CodeClosed
			}
			return backend.CodeTransient
		}
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return backend.CodeTransient
	}
	return backend.CodeUnknown
}

// authRefused reports whether err is the cluster's refusal of the
// client's credentials or of a request's permissions.
func authRefused(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrAuthFailed) ||
		errors.Is(err, rpctypes.ErrInvalidAuthToken) || errors.Is(err, rpctypes.ErrUserEmpty)
}

// serverTimedOut reports whether err is the server's report that the
// request's deadline passed while it worked on it: gRPC code Unknown with
// the message of context.DeadlineExceeded (the client's deadline travels
// with the request, and the server may see it pass first).
func serverTimedOut(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Unknown && s.Message() == context.DeadlineExceeded.Error()
}

// grpcCode is the gRPC status code of an etcd client error.
func grpcCode(err error) (codes.Code, bool) {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code(), true
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.OK && s.Code() != codes.Unknown {
		return s.Code(), true
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Code(), true
	}
	return codes.Unknown, false
}

// resendable reports whether a request that failed with err, its outcome
// unknown, may be sent again: a try that timed out, or an error that
// waiting may cure.
func (d *driver) resendable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || d.ErrorCode(err) == backend.CodeTransient
}

// ctxErr is the error of a wait that ctx ended.
func ctxErr(ctx context.Context) error { return async.CtxError(ctx) }

// retry runs an idempotent request fn with a bounded time per send, and
// sends it again while its answer is lost to an error that waiting may cure
// and s lives. It returns errRestart when s is lost, errClosed when the
// driver closes, and the ctx error when ctx ends (with ErrUnavailable when
// an earlier send failed: the cluster could not answer).
func (d *driver) retry(ctx context.Context, s *session, fn func(ctx context.Context) error) error {
	var failed error
	for try := 0; ; try++ {
		tctx, cancel := context.WithTimeout(ctx, createTry)
		err := fn(tctx)
		timedOut := tctx.Err() != nil // the server may report it as code Unknown
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			d.sessionLost(s, "the cluster refused the session's lease: expired or revoked")
			return errRestart
		case ctx.Err() != nil:
			if failed != nil {
				return unreachable(ctx, failed)
			}
			return ctxErr(ctx)
		case d.ctx.Err() != nil:
			return errClosed
		case d.sessionDead(s):
			return errRestart
		case !timedOut && !d.resendable(err):
			return err
		}
		failed = err
		if err := d.pause(ctx, min(time.Duration(try+1)*20*time.Millisecond, 200*time.Millisecond)); err != nil {
			if ctx.Err() != nil {
				return unreachable(ctx, failed)
			}
			return err
		}
	}
}
