package memcached

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
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
			return nil, fmt.Errorf("%w (%v)", ctx.Err(), err)
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

// errReply marks a well-formed but unexpected reply: the connection is still
// in sync.
type errReply struct{ line string }

func (e *errReply) Error() string { return fmt.Sprintf("unexpected memcached reply %q", e.line) }

// do runs one exchange on a connection to addr. The connection's deadline is
// the earlier of ctx's deadline and now + the I/O timeout, and cancelling
// ctx interrupts the exchange. A connection is reused only after an
// exchange that left it in sync.
func (p *rawPool) do(ctx context.Context, addr net.Addr, fn func(rw *bufio.ReadWriter) error) error {
	if err := ctx.Err(); err != nil {
		return err
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
			return fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
	case err == nil || errors.As(err, &reply):
		p.put(addr, c)
	default:
		c.nc.Close()
		if ctx.Err() != nil {
			return fmt.Errorf("%w (%v)", ctx.Err(), err)
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

func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("memcached reply line too long")
		}
		return nil, err
	}
	return bytes.TrimSuffix(line, []byte("\r\n")), nil
}

// mdResult is the answer to a meta compare-and-delete.
type mdResult int

const (
	mdDeleted     mdResult = iota // HD: deleted
	mdExists                      // EX: the CAS value did not match
	mdNotFound                    // NF: no such item
	mdUnsupported                 // the server does not speak the meta protocol
)

func (r mdResult) String() string {
	switch r {
	case mdDeleted:
		return "HD"
	case mdExists:
		return "EX"
	case mdNotFound:
		return "NF"
	}
	return "unsupported"
}

// parseMDReply interprets the reply line of "md <key> C<cas>". memcached
// 1.6 answers HD, EX or NF (early 1.6 meta versions said OK for HD); a server
// without the meta protocol answers ERROR, and one with a meta protocol that
// lacks the C flag CLIENT_ERROR. Anything else (SERVER_ERROR ...) is an
// error.
func parseMDReply(line []byte) (mdResult, error) {
	switch {
	case bytes.Equal(line, []byte("HD")), bytes.Equal(line, []byte("OK")):
		return mdDeleted, nil
	case bytes.Equal(line, []byte("EX")):
		return mdExists, nil
	case bytes.Equal(line, []byte("NF")):
		return mdNotFound, nil
	case bytes.Equal(line, []byte("ERROR")), bytes.HasPrefix(line, []byte("CLIENT_ERROR")):
		return mdUnsupported, nil
	}
	return 0, &errReply{line: string(line)}
}

// metaDelete sends "md <key> C<cas>" to addr: memcached deletes the item only
// if its CAS value is still cas.
func (p *rawPool) metaDelete(ctx context.Context, addr net.Addr, key string, cas uint64) (mdResult, error) {
	var res mdResult
	err := p.do(ctx, addr, func(rw *bufio.ReadWriter) error {
		if _, err := fmt.Fprintf(rw, "md %s C%d\r\n", key, cas); err != nil {
			return err
		}
		if err := rw.Flush(); err != nil {
			return err
		}
		line, err := readLine(rw.Reader)
		if err != nil {
			return err
		}
		res, err = parseMDReply(line)
		return err
	})
	return res, err
}

// storeResult is the answer to a text-protocol storage command.
type storeResult int

const (
	stored storeResult = iota
	notStored
)

// store sends "<verb> <key> 0 <exptime> <len>" with value to addr.
func (p *rawPool) store(ctx context.Context, addr net.Addr, verb, key string, exptime int32, value []byte) (storeResult, error) {
	var res storeResult
	err := p.do(ctx, addr, func(rw *bufio.ReadWriter) error {
		if _, err := fmt.Fprintf(rw, "%s %s 0 %d %d\r\n", verb, key, exptime, len(value)); err != nil {
			return err
		}
		if _, err := rw.Write(value); err != nil {
			return err
		}
		if _, err := rw.WriteString("\r\n"); err != nil {
			return err
		}
		if err := rw.Flush(); err != nil {
			return err
		}
		line, err := readLine(rw.Reader)
		if err != nil {
			return err
		}
		switch string(line) {
		case "STORED":
			res = stored
		case "NOT_STORED", "EXISTS", "NOT_FOUND":
			res = notStored
		default:
			return &errReply{line: string(line)}
		}
		return nil
	})
	return res, err
}

// fetch sends "get <key>" to addr and returns the value, or ok false on a
// miss.
func (p *rawPool) fetch(ctx context.Context, addr net.Addr, key string) (value []byte, ok bool, err error) {
	err = p.do(ctx, addr, func(rw *bufio.ReadWriter) error {
		if _, err := fmt.Fprintf(rw, "get %s\r\n", key); err != nil {
			return err
		}
		if err := rw.Flush(); err != nil {
			return err
		}
		for {
			line, err := readLine(rw.Reader)
			if err != nil {
				return err
			}
			if string(line) == "END" {
				return nil
			}
			// VALUE <key> <flags> <bytes>
			f := bytes.Fields(line)
			if len(f) < 4 || string(f[0]) != "VALUE" {
				return fmt.Errorf("malformed memcached get reply %q", line)
			}
			n, err := strconv.Atoi(string(f[3]))
			if err != nil || n < 0 || n > 1<<20 {
				return fmt.Errorf("malformed memcached get reply %q", line)
			}
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(rw.Reader, buf); err != nil {
				return err
			}
			value, ok = buf[:n], true
		}
	})
	return value, ok, err
}
