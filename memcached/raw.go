package memcached

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/distlock/distlock/internal/async"
)

// rawPool is a small pool of plain connections to memcached servers, used
// for what gomemcache cannot send: the meta-protocol compare-and-delete
// (md <key> C<cas>) and the server-list pin, which must reach one named
// server. Every exchange honours its context (deadline and cancellation)
// and the client's I/O timeout.
type rawPool struct {
	dial    func(ctx context.Context, network, address string) (net.Conn, error)
	timeout time.Duration
	maxIdle int

	mu     sync.Mutex
	idle   map[string][]*rawConn
	closed bool
}

type rawConn struct {
	nc net.Conn
	rw *bufio.ReadWriter
}

func newRawPool(dial func(ctx context.Context, network, address string) (net.Conn, error), timeout time.Duration, maxIdle int) *rawPool {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	return &rawPool{dial: dial, timeout: timeout, maxIdle: max(maxIdle, 1), idle: map[string][]*rawConn{}}
}

var errPoolClosed = errors.New("memcached connection pool closed")

func (p *rawPool) get(ctx context.Context, addr net.Addr) (*rawConn, error) {
	key := addr.String()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errPoolClosed
	}
	if list := p.idle[key]; len(list) > 0 {
		c := list[len(list)-1]
		p.idle[key] = list[:len(list)-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	nc, err := p.dial(dctx, addr.Network(), key)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (%v)", async.CtxError(ctx), err)
		}
		return nil, err
	}
	return &rawConn{nc: nc, rw: bufio.NewReadWriter(bufio.NewReader(nc), bufio.NewWriter(nc))}, nil
}

func (p *rawPool) put(addr net.Addr, c *rawConn) {
	key := addr.String()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle[key]) >= p.maxIdle {
		c.nc.Close()
		return
	}
	p.idle[key] = append(p.idle[key], c)
}

// flush closes the idle connections to every server: after an I/O error
// they are likely dead too (a restarted server).
func (p *rawPool) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, list := range p.idle {
		for _, c := range list {
			c.nc.Close()
		}
		delete(p.idle, k)
	}
}

func (p *rawPool) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.flush()
}

// do runs one exchange on a connection to addr. The connection's deadline is
// the earlier of ctx's deadline and now + the I/O timeout, and cancelling
// ctx interrupts the exchange. A connection is reused only after an
// exchange that left it in sync.
func (p *rawPool) do(ctx context.Context, addr net.Addr, fn func(rw *bufio.ReadWriter) error) error {
	if ctx.Err() != nil {
		return async.CtxError(ctx)
	}
	c, err := p.get(ctx, addr)
	if err != nil {
		return err
	}
	dl := time.Now().Add(p.timeout)
	ctxDeadline := false // the connection's deadline is ctx's
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl, ctxDeadline = d, true
	}
	_ = c.nc.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	err = fn(c.rw)
	interrupted := !stop()
	var reply *errReply
	switch {
	case interrupted:
		c.nc.Close()
		if err != nil {
			return fmt.Errorf("%w (%v)", async.CtxError(ctx), err)
		}
	case err == nil || errors.As(err, &reply):
		p.put(addr, c)
	default:
		c.nc.Close()
		if ctx.Err() != nil {
			return fmt.Errorf("%w (%v)", async.CtxError(ctx), err)
		}
		// ctx's deadline hit the connection a moment before ctx's own
		// timer fired.
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && ctxDeadline {
			return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
		}
	}
	return err
}
