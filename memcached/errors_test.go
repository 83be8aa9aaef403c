package memcached

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ErrorCode classifies what the driver returns unwrapped. Needs no server:
// the refused dial is to a closed loopback port.
func TestErrorCode(t *testing.T) {
	d := &driver{}
	refused := func() error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		ln.Close()
		c := memcache.New(addr)
		_, err = c.Get("k")
		return err
	}()
	require.ErrorIs(t, refused, syscall.ECONNREFUSED, "get from a closed port: %v, want connection refused", refused)
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, c := range []struct {
		name string
		err  error
		want backend.Code
	}{
		{"connection refused", refused, backend.CodeTransient},
		{"i/o timeout", timeout, backend.CodeTransient},
		{"connect timeout", &memcache.ConnectTimeoutError{Addr: &net.TCPAddr{}}, backend.CodeTransient},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, backend.CodeTransient},
		{"broken pipe", fmt.Errorf("write: %w", syscall.EPIPE), backend.CodeTransient},
		{"EOF", io.EOF, backend.CodeTransient},
		{"unexpected EOF", io.ErrUnexpectedEOF, backend.CodeTransient},
		{"too many connections", errors.New(`memcache: unexpected line in get response: "ERROR Too many open connections\r\n"`), backend.CodeTransient},
		{"out of memory", errors.New(`memcache: unexpected response line from "add": "SERVER_ERROR out of memory storing object\r\n"`), backend.CodeUnavailable},
		{"out of memory, marked", shape(&errReply{line: "SERVER_ERROR out of memory storing object"}), backend.CodeUnavailable},
		{"other server error", &errReply{line: "SERVER_ERROR object too large for cache"}, backend.CodeUnavailable},
		{"no servers", memcache.ErrNoServers, backend.CodeUnavailable},
		{"unknown host", &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}, backend.CodeUnavailable},
		{"desync", &desyncError{reply: "garbage"}, backend.CodeUnavailable},
		{"pool closed", errPoolClosed, backend.CodeClosed},
		{"pool closed, wrapped", fmt.Errorf("md: %w", errPoolClosed), backend.CodeClosed},
	} {
		assert.Equal(t, c.want, d.ErrorCode(c.err), "%s: ErrorCode(%v)", c.name, c.err)
	}
	assert.ErrorIs(t, shape(errors.New("SERVER_ERROR out of memory storing object")), errOutOfMemory, "shape does not mark out of memory")
	if err := shape(timeout); err != timeout {
		t.Errorf("shape changed a network error: %v", err)
	}
}

// timeoutDialer fails its first n dials with a timeout (gomemcache turns
// them into *memcache.ConnectTimeoutError), then dials for real.
type timeoutDialer struct{ left atomic.Int32 }

type dialTimeout struct{}

func (dialTimeout) Error() string { return "dial timeout (test)" }

func (dialTimeout) Timeout() bool { return true }

func (dialTimeout) Temporary() bool { return true }

func (td *timeoutDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if td.left.Add(-1) >= 0 {
		return nil, dialTimeout{}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// A connect timeout is an outage that may pass: WithRetryUnavailable waits
// it out. Before ErrorCode, gomemcache's *ConnectTimeoutError (not a
// net.Error, and without "i/o timeout" in its text) was wrapped in
// ErrUnavailable but not seen as transient, so Acquire gave up at once.
func TestConnectTimeoutIsTransient(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	td := &timeoutDialer{}
	td.left.Store(2)
	c := memcache.New(srv.Addr())
	c.DialContext = td.dial
	l, err := New(c, WithCloseClient())
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := ctxT(t, 10*time.Second)
	lease, err := l.Acquire(ctx, "connect-timeout", distlock.WithRetryUnavailable(true))
	require.NoError(t, err, "Acquire with WithRetryUnavailable over two connect timeouts")
	_ = lease.Release(ctx)

	_ = c.Close() // no idle connection: the next request dials
	td.left.Store(1)
	_, err = l.TryAcquire(ctx, "connect-timeout/2")
	var cte *memcache.ConnectTimeoutError
	if !errors.Is(err, distlock.ErrUnavailable) || !backend.IsTransient(err) || !errors.As(err, &cte) {
		t.Errorf("TryAcquire over a connect timeout = %v, want a transient ErrUnavailable carrying the client's error", err)
	}
}
