package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
)

// Errors of the driver's own making. The driver returns go-zookeeper's
// errors as they are (or wrapped with context by %w); ErrorCode says what
// they mean, and package distlock wraps them once.
var (
	// errRestart: the session of the attempt was lost (or the attempt's
	// node vanished); nothing of the attempt is left behind and the
	// acquisition may start over on a new session.
	errRestart = errors.New("zookeeper: session lost during the attempt")
	// errNoSession: no usable session within the connect timeout.
	errNoSession = errors.New("zookeeper: no session")
	// errCreateFailed: the creates of one attempt kept failing.
	errCreateFailed = errors.New("zookeeper: create failed")
)

// ErrorCode implements backend.ErrorClassifier. A lost connection or
// session (go-zookeeper's ErrConnectionClosed "zk: connection closed",
// ErrNoServer "zk: could not connect to a server", ErrNothing "zk: no
// server responses to process", ErrSessionExpired, ErrSessionMoved) and the
// driver's own "no session within the connect timeout" and "cannot connect
// to any server" (every address refused the client's dials) are CodeTransient:
// waiting may cure them. Refused credentials or ACLs (ErrNoAuth,
// ErrAuthFailed) are CodeAuth, an ACL the server rejects (ErrInvalidACL)
// CodeMisconfigured, and a *zk.Conn its owner closed (ErrClosing)
// CodeUnavailable: waiting will not cure them.
func (d *driver) ErrorCode(err error) backend.Code {
	switch {
	case errors.Is(err, zk.ErrNoAuth), errors.Is(err, zk.ErrAuthFailed):
		return backend.CodeAuth
	case errors.Is(err, zk.ErrInvalidACL):
		return backend.CodeMisconfigured
	case errors.Is(err, zk.ErrClosing):
		return backend.CodeUnavailable
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer), errors.Is(err, zk.ErrNothing),
		errors.Is(err, zk.ErrSessionExpired), errors.Is(err, zk.ErrSessionMoved),
		errors.Is(err, errRestart), errors.Is(err, errNoSession), errors.Is(err, errCreateFailed),
		errors.Is(err, errUnreachable):
		return backend.CodeTransient
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return backend.CodeTransient
	}
	return backend.CodeUnknown
}

// retryable reports whether a request that failed with err may be sent
// again on the same session: the connection was lost, or the request could
// not be sent.
func retryable(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrSessionMoved)
}

// mapErr turns a client error of a request on s into the driver's error:
// errRestart when s is lost, ErrClosed when the driver closed, the client's
// error otherwise.
func (d *driver) mapErr(s *session, err error) error {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, backend.ErrClosed):
		return err
	case errors.Is(err, zk.ErrSessionExpired):
		d.sessionLost(s, "the server reported the session expired")
		return errRestart
	case errors.Is(err, zk.ErrClosing), retryable(err):
		if d.isClosed() {
			return backend.ErrClosed
		}
		if d.sessionDead(s) {
			return errRestart
		}
	}
	return err
}

// ctxError is the error of a request that ctx cut short: async.CtxError,
// and if the client was not connected then (conn's state says so), also
// ErrUnavailable: the ensemble could not be reached.
func ctxError(ctx context.Context, conn *zk.Conn) error {
	if conn != nil {
		if st := conn.State(); st != zk.StateHasSession {
			return unreachable(ctx, fmt.Errorf("zookeeper client %v", st))
		}
	}
	return async.CtxError(ctx)
}

// unreachable is the error of a wait for the ensemble that ctx cut short
// while the ensemble could not be reached: ErrUnavailable, err saying how,
// and async.CtxError saying why the wait ended.
func unreachable(ctx context.Context, err error) error {
	return fmt.Errorf("%w: %w: %w", backend.ErrUnavailable, err, async.CtxError(ctx))
}

// ctxErrorNow is ctxError for the driver's current connection.
func (d *driver) ctxErrorNow(ctx context.Context) error {
	d.mu.Lock()
	conn := d.conn
	d.mu.Unlock()
	return ctxError(ctx, conn)
}
