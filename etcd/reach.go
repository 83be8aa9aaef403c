package etcd

import (
	"context"
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
	return dialEndpoints(ctx, d.client.Endpoints())
}

// dialEndpoints dials every endpoint at once (TCP only, each within
// reachWait) and returns nil if one answers, else a transient
// ErrUnavailable listing each endpoint's dial error.
func dialEndpoints(ctx context.Context, endpoints []string) error {
	errs := make([]error, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		addr, ok := tcpAddr(ep)
		if !ok {
			return nil // not a TCP endpoint: let the request tell
		}
		wg.Go(func() {
			dctx, cancel := context.WithTimeout(ctx, reachWait)
			defer cancel()
			var dl net.Dialer
			c, err := dl.DialContext(dctx, "tcp", addr)
			if err == nil {
				_ = c.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	var msgs []string
	for _, err := range errs {
		if err == nil {
			return nil
		}
		msgs = append(msgs, err.Error())
	}
	if ctx.Err() != nil {
		return nil
	}
	return backend.Wrap(backend.CodeTransient, fmt.Errorf("%w: %s", errUnreachable, strings.Join(msgs, "; ")))
}

// errUnreachable: no endpoint of the cluster accepts connections.
var errUnreachable = errors.New("etcd: no endpoint reachable")

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
