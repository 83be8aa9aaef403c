package redislua

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
)

// ErrorCode classifies an error of go-redis (or of a Redis server's reply)
// for backend.ErrorClassifier, for every Redis-based driver:
//
//   - CodeClosed: the client was closed (goredis.ErrClosed);
//   - CodeAuth: refused credentials or permissions (NOAUTH, WRONGPASS,
//     NOPERM, and the "Protocol error: unauthenticated (multi)bulk length"
//     a server that wants a password answers a long command with);
//   - CodeUnavailable, which waiting will not cure: a TLS handshake or certificate failure,
//     a host name that does not resolve, and every other error reply
//     (OOM, MISCONF, ERR ...);
//   - CodeTransient: a refused, reset or timed-out connection (any
//     net.Error, io.EOF, "connection refused", "i/o timeout"), a pool
//     timeout, and the replies of a server that is starting, failing over
//     or busy (LOADING, READONLY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, BUSY,
//     NOREPLICAS, max number of clients reached);
//   - CodeUnknown: a WRONGTYPE reply (a foreign key under the lock's name:
//     see Explain) and nil.
func ErrorCode(err error) backend.Code {
	switch {
	case err == nil, goredis.HasErrorPrefix(err, "WRONGTYPE"):
		return backend.CodeUnknown
	case errors.Is(err, goredis.ErrClosed):
		return backend.CodeClosed
	case authRefused(err):
		return backend.CodeAuth
	case tlsFailed(err):
		return backend.CodeUnavailable
	case errors.Is(err, goredis.ErrPoolTimeout), errors.Is(err, goredis.ErrPoolExhausted):
		return backend.CodeTransient
	case IsReply(err):
		return replyCode(err)
	}
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return backend.CodeUnavailable // a misspelt host name, not an outage
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return backend.CodeTransient
	}
	msg := err.Error()
	for _, m := range []string{"connection refused", "i/o timeout", "connection reset"} {
		if strings.Contains(msg, m) {
			return backend.CodeTransient
		}
	}
	return backend.CodeUnavailable
}

// transientReplies are the error-reply prefixes of a server that is
// loading its data, failing over, in a cluster reconfiguration or running a
// long script: waiting cures them.
var transientReplies = []string{"LOADING ", "READONLY ", "MASTERDOWN ", "TRYAGAIN ", "CLUSTERDOWN ", "BUSY ", "NOREPLICAS ", "max number of clients reached"}

// IsRedirect reports whether err is a Cluster redirect (ASK, MOVED) that
// reached the caller: from a Cluster client, one that ran out of
// redirects while a slot migrates, which waiting cures; from any other
// client, a node of a Cluster used as a single server, which it does not.
func IsRedirect(err error) bool {
	return goredis.HasErrorPrefix(err, "ASK ") || goredis.HasErrorPrefix(err, "MOVED ")
}

// replyCode classifies an error reply.
func replyCode(err error) backend.Code {
	for _, p := range transientReplies {
		if goredis.HasErrorPrefix(err, p) {
			return backend.CodeTransient
		}
	}
	return backend.CodeUnavailable
}

// tlsFailed reports whether err is a TLS handshake failure (a certificate
// that does not verify comes as a *tls.CertificateVerificationError,
// whatever x509 error it wraps).
func tlsFailed(err error) bool {
	var (
		rh tls.RecordHeaderError
		ae *tls.AlertError
		cv *tls.CertificateVerificationError
	)
	return errors.As(err, &rh) || errors.As(err, &ae) || errors.As(err, &cv)
}

// authRefused reports whether err is a refusal of our credentials or
// permissions. A server that wants a password answers a command of more
// than 10 arguments (or a long one) from an unauthenticated client with
// "ERR Protocol error: unauthenticated multibulk length" (or "bulk length")
// instead of NOAUTH, and closes the connection.
func authRefused(err error) bool {
	if goredis.HasErrorPrefix(err, "NOAUTH") || goredis.HasErrorPrefix(err, "WRONGPASS") || goredis.HasErrorPrefix(err, "NOPERM") {
		return true
	}
	var re goredis.Error
	return errors.As(err, &re) && strings.Contains(re.Error(), "Protocol error: unauthenticated")
}

// Explain wraps a WRONGTYPE reply in what it means, and words the
// "Protocol error: unauthenticated" reply as the NOAUTH it stands for (a
// long command gets it where a short one gets NOAUTH); other errors are
// returned unchanged.
func Explain(err error) error {
	switch {
	case goredis.HasErrorPrefix(err, "WRONGTYPE"):
		return fmt.Errorf("redis key of the lock holds a value of another type (does another application use the key prefix?): %w", err)
	case authRefused(err) && !goredis.HasErrorPrefix(err, "NOAUTH") && !goredis.HasErrorPrefix(err, "WRONGPASS") && !goredis.HasErrorPrefix(err, "NOPERM"):
		var na noAuthError
		if errors.As(err, &na) {
			return err
		}
		return noAuthError{err}
	}
	return err
}

// noAuthError is the "Protocol error: unauthenticated" reply worded as
// NOAUTH; the reply stays reachable with errors.As.
type noAuthError struct{ reply error }

func (e noAuthError) Error() string {
	return "NOAUTH Authentication required (the server wants a password: redis://:PASSWORD@host:port)"
}
func (e noAuthError) Unwrap() error { return e.reply }

// OpError shapes the error of an operation that ran under ctx, for a driver
// whose errors the root classifies with ErrorCode: nil stays nil; an error
// after which ctx had ended that is not ctx's own (the client's socket
// deadline derived from ctx) is classified here, since the ctx error it
// then also wraps (async.CtxError) stops the root's classification; every
// other error is returned raw (see Explain).
func OpError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	async.Settle(ctx, err)
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) && !errors.Is(err, backend.ErrInvalidTTL) {
		return fmt.Errorf("%w: %w", backend.Wrap(ErrorCode(err), Explain(err)), async.CtxError(ctx))
	}
	return Explain(err)
}

// Classify puts a go-redis error into distlock's conventions, for a driver
// that wraps the sentinels itself (Redlock's per-node errors):
//
//   - nil stays nil, and an ErrInvalidTTL is returned as it is;
//   - an error caused by ctx ending is returned so that errors.Is(err,
//     ctx.Err()) holds (wrapped with backend.ErrUnavailable as well when
//     the client reported a network timeout rather than the context error);
//   - a WRONGTYPE reply is returned as Explain words it;
//   - refused credentials or permissions wrap backend.ErrAuth;
//   - every other failure wraps backend.ErrUnavailable, as a
//     *backend.TransientError when ErrorCode says CodeTransient.
//
// The go-redis error stays reachable with errors.As / errors.Is.
func Classify(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, backend.ErrInvalidTTL) {
		return err
	}
	async.Settle(ctx, err)
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(err, ctxErr) {
			return err
		}
		return fmt.Errorf("%w: %w: %w", backend.ErrUnavailable, err, ctxErr)
	}
	switch ErrorCode(err) {
	case backend.CodeUnknown:
		return Explain(err)
	case backend.CodeTransient:
		return backend.Wrap(backend.CodeTransient, err)
	case backend.CodeAuth:
		return backend.Wrap(backend.CodeAuth, err)
	}
	return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, goredis.ErrNoScript) || goredis.HasErrorPrefix(err, "NOSCRIPT"))
}

// IsReply reports whether err is an error reply from the Redis server (the
// command reached the server and was refused), as opposed to a network,
// pool or context error after which the command may or may not have run.
func IsReply(err error) bool {
	var re goredis.Error
	return errors.As(err, &re)
}

// Ambiguous reports whether a command that failed with err may nevertheless
// have run on the server: any error that is not a server reply, except a
// failure to connect and a request a Batch dropped while it was queued
// (the command was never sent).
func Ambiguous(err error) bool {
	return err != nil && !IsReply(err) && !errors.Is(err, backend.ErrInvalidTTL) && !isDialError(err) && !NotSent(err)
}

// isDialError reports whether err is a failure to open a connection.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
