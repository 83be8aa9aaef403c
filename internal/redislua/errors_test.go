package redislua

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
	"github.com/stretchr/testify/assert"
)

// reply is an error reply of the server, as go-redis returns it.
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}

// TestErrorCode (no server): every message pattern the root's outage check
// recognised for Redis, and the auth, TLS and closed cases.
func TestErrorCode(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "connection refused"}}
	for _, c := range []struct {
		err  error
		want backend.Code
	}{
		{reply("LOADING Redis is loading the dataset in memory"), backend.CodeTransient},
		{reply("READONLY You can't write against a read only replica."), backend.CodeTransient},
		{reply("MASTERDOWN Link with MASTER is down"), backend.CodeTransient},
		{reply("TRYAGAIN Multiple keys request during rehashing of slot"), backend.CodeTransient},
		// A redirect to a client that is not a Cluster client: a Cluster
		// node used as one server, which waiting does not cure (the redis
		// driver makes it transient for Cluster clients).
		{reply("ASK 3808 127.0.0.1:20146"), backend.CodeUnavailable},
		{reply("MOVED 3808 127.0.0.1:20146"), backend.CodeUnavailable},
		{reply("CLUSTERDOWN The cluster is down"), backend.CodeTransient},
		{reply("BUSY Redis is busy running a script."), backend.CodeTransient},
		{reply("NOREPLICAS Not enough good replicas to write."), backend.CodeTransient},
		{reply("ERR max number of clients reached"), backend.CodeTransient},
		{refused, backend.CodeTransient},
		{fmt.Errorf("dial tcp 127.0.0.1:1: %w", syscall.ECONNREFUSED), backend.CodeTransient},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), backend.CodeTransient},
		{errors.New("read tcp 127.0.0.1:2->127.0.0.1:1: i/o timeout"), backend.CodeTransient},
		{fmt.Errorf("read: %w", io.EOF), backend.CodeTransient},
		{goredis.ErrPoolTimeout, backend.CodeTransient},
		{goredis.ErrPoolExhausted, backend.CodeTransient},
		{goredis.ErrClosed, backend.CodeClosed},
		{reply("NOAUTH Authentication required."), backend.CodeAuth},
		{reply("WRONGPASS invalid username-password pair or user is disabled."), backend.CodeAuth},
		{reply("ERR Protocol error: unauthenticated multibulk length"), backend.CodeAuth},
		{reply("NOPERM this user has no permissions to run the 'evalsha' command"), backend.CodeAuth},
		{fmt.Errorf("handshake: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), backend.CodeUnavailable},
		{fmt.Errorf("handshake: %w", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), backend.CodeUnavailable},
		{&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "nosuch", IsNotFound: true}}, backend.CodeUnavailable},
		{reply("OOM command not allowed when used memory > 'maxmemory'."), backend.CodeUnavailable},
		{reply("BUSYKEY Target key name already exists."), backend.CodeUnavailable},
		{reply("WRONGTYPE Operation against a key holding the wrong kind of value"), backend.CodeUnknown},
		{nil, backend.CodeUnknown},
	} {
		assert.Equal(t, c.want, ErrorCode(c.err), "ErrorCode(%v)", c.err)
	}
}

// TestOpErrorShapes (no server): an error after ctx ended keeps both the
// client's error, classified, and ctx's; otherwise the error stays raw.
func TestOpErrorShapes(t *testing.T) {
	timeout := errors.New("read tcp: i/o timeout")
	ctx, cancel := context.WithCancel(context.Background())
	if err := OpError(ctx, timeout); err != timeout {
		t.Errorf("live ctx: %v, want the error unchanged", err)
	}
	cancel()
	err := OpError(ctx, timeout)
	if !errors.Is(err, timeout) || !errors.Is(err, context.Canceled) || !errors.Is(err, backend.ErrUnavailable) || !backend.IsTransient(err) {
		t.Errorf("ended ctx: %v, want the timeout, transient, and context.Canceled", err)
	}
	if err := OpError(ctx, context.Canceled); err != context.Canceled {
		t.Errorf("ctx's own error: %v", err)
	}
	assert.ErrorIs(t, Classify(ctx, context.Canceled), context.Canceled, "Classify(canceled)")
	if err := OpError(context.Background(), reply("WRONGTYPE x")); IsReply(err) == false || errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("WRONGTYPE: %v", err)
	}
}

// lateTimerCtx is a context whose deadline has passed but whose timer has
// not fired yet: Err is nil until Done closes, a moment later.
type lateTimerCtx struct {
	context.Context
	dl   time.Time
	done chan struct{}
}

func newLateTimerCtx(late time.Duration) *lateTimerCtx {
	c := &lateTimerCtx{Context: context.Background(), dl: time.Now().Add(-time.Millisecond), done: make(chan struct{})}
	time.AfterFunc(late, func() { close(c.done) })
	return c
}

func (c *lateTimerCtx) Deadline() (time.Time, bool) { return c.dl, true }
func (c *lateTimerCtx) Done() <-chan struct{}       { return c.done }
func (c *lateTimerCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// A network timeout at the caller's deadline, seen before the ctx's timer
// fired (the client set the connection's deadline from ctx's), is the
// caller's deadline, not an outage: found as "cancelled acquisition:
// backend unavailable: i/o timeout, want the ctx error" in the Cluster
// conformance suite's cancel-in-flight check.
func TestNetTimeoutAtDeadlineIsCtxError(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	// Any other error at that moment is classified at once, as it is.
	start := time.Now()
	if err := OpError(newLateTimerCtx(time.Minute), reply("ERR no such thing")); errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 100*time.Millisecond {
		t.Errorf("OpError(deadline passed, timer late, an error reply) = %v after %v, want the reply at once", err, time.Since(start))
	}
	for name, classify := range map[string]func(context.Context, error) error{"OpError": OpError, "Classify": Classify} {
		err := classify(newLateTimerCtx(20*time.Millisecond), timeout)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "%s(deadline passed, timer late, i/o timeout) = %v, want the ctx error", name, err)
	}
	// A live ctx leaves a timeout what it is, at once.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start = time.Now()
	if err := OpError(ctx, timeout); errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 100*time.Millisecond {
		t.Errorf("OpError(live ctx, i/o timeout) = %v after %v, want no ctx error, at once", err, time.Since(start))
	}
}
