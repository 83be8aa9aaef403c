package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/distlock/distlock/backend"
)

// reachWait bounds how long reachable waits for the client's connection
// to settle and for each endpoint's TCP dial.
const reachWait = time.Second

// reachable returns nil when the client has a usable connection to the
// cluster, or some endpoint at least accepts TCP connections; when every
// endpoint refuses or does not answer a dial, it returns a transient
// ErrUnavailable naming each endpoint and its dial error, so that a
// cluster that is down is reported at once, with its cause, instead of
// after the request's deadline (the client waits for a connection until
// then, and its error names neither address nor cause). It takes at most
// about 2 × reachWait, within ctx.
func (d *driver) reachable(ctx context.Context) error {
	conn := d.client.ActiveConnection()
	st := conn.GetState()
	if st == connectivity.Ready {
		return nil
	}
	conn.Connect()
	wctx, cancel := context.WithTimeout(ctx, reachWait)
	for st != connectivity.Ready && st != connectivity.TransientFailure && st != connectivity.Shutdown {
		if !conn.WaitForStateChange(wctx, st) {
			break
		}
		st = conn.GetState()
	}
	cancel()
	if st == connectivity.Ready || ctx.Err() != nil {
		return nil // the request says how it goes, or that ctx ended
	}
	return dialEndpoints(ctx, d.client.Endpoints(), d.cfg.tls)
}

// dialEndpoints dials every endpoint at once (each within reachWait; with
// tlsCfg also the TLS handshake, and a read that would receive the
// server's refusal of the client's certificate) and returns nil if one
// answers, else an ErrUnavailable listing each endpoint's error:
// transient when every one failed to connect, lasting when a TLS
// handshake failed (a certificate that is not trusted, or refused).
func dialEndpoints(ctx context.Context, endpoints []string, tlsCfg *tls.Config) error {
	errs := make([]error, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		addr, ok := tcpAddr(ep)
		if !ok {
			return nil // not a TCP endpoint: let the request tell
		}
		wg.Go(func() { errs[i] = dialOne(ctx, addr, tlsCfg) })
	}
	wg.Wait()
	var (
		msgs    []string
		lasting bool
	)
	for _, err := range errs {
		if err == nil {
			return nil
		}
		var te *tlsError
		lasting = lasting || errors.As(err, &te)
		msgs = append(msgs, err.Error())
	}
	if ctx.Err() != nil {
		return nil
	}
	code := backend.CodeTransient
	if lasting {
		code = backend.CodeUnavailable
	}
	return backend.Wrap(code, fmt.Errorf("%w: %s", errUnreachable, strings.Join(msgs, "; ")))
}

// tlsError is a failed TLS handshake with an endpoint.
type tlsError struct {
	addr string
	err  error
}

func (e *tlsError) Error() string { return fmt.Sprintf("TLS with %s: %v", e.addr, e.err) }
func (e *tlsError) Unwrap() error { return e.err }

// dialOne connects to addr, with a TLS handshake if tlsCfg is set, within
// reachWait.
func dialOne(ctx context.Context, addr string, tlsCfg *tls.Config) error {
	dctx, cancel := context.WithTimeout(ctx, reachWait)
	defer cancel()
	var dl net.Dialer
	c, err := dl.DialContext(dctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if tlsCfg == nil {
		return nil
	}
	cfg := tlsCfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(dctx); err != nil {
		return &tlsError{addr: addr, err: err}
	}
	// With TLS 1.3 the server refuses a client certificate after the
	// client's handshake ended: its alert is the first thing to read. A
	// server that accepted us waits for the client to speak.
	_ = tc.SetReadDeadline(time.Now().Add(reachWait / 4))
	if _, err := tc.Read(make([]byte, 1)); err != nil {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return &tlsError{addr: addr, err: err}
		}
	}
	return nil
}

// errUnreachable: no endpoint of the cluster accepts connections (or
// completes a TLS handshake).
var errUnreachable = errors.New("etcd: cannot connect to any endpoint")

// tcpAddr is the host:port of a client endpoint ("host:port" or a URL);
// false for unix sockets.
func tcpAddr(ep string) (string, bool) {
	if !strings.Contains(ep, "://") {
		return ep, true
	}
	u, err := url.Parse(ep)
	if err != nil || strings.HasPrefix(u.Scheme, "unix") || u.Host == "" {
		return "", false
	}
	return u.Host, true
}
