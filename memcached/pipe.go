package memcached

import (
	"bufio"
	"context"
	"net"
	"sync"

	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/natbatch"
)

// maxPipeBatch bounds the requests of one exchange, so that reading their
// replies stays far within the client's I/O timeout.
const maxPipeBatch = 512

// pipe is natural batching of the Locker's requests to one server: requests
// queued while an exchange is in flight go out together in one write, their
// replies read in order. A lone request is never delayed; a queued request
// whose ctx ended is never sent; a sent one is always read to its end.
type pipe struct {
	pool *rawPool
	addr net.Addr
	q    *natbatch.Queue[*pipeReq]
}

// newPipe returns the pipe to addr over pool; its flushes run on g.
func newPipe(pool *rawPool, addr net.Addr, g *async.Group) *pipe {
	p := &pipe{pool: pool, addr: addr}
	p.q = natbatch.New(g, maxPipeBatch, p.exchange, nil)
	return p
}

// pipeReq is one request of a pipe: its command bytes and the reader of
// its reply.
type pipeReq struct {
	natbatch.Req
	cmd  []byte
	read func(r *bufio.Reader) error
	err  error
}

// do sends cmd through p and hands its reply to read, which returns an
// *errReply for a well-formed reply it does not expect (the connection
// stays in step) and any other error for a reply it cannot place. do
// returns read's error, the I/O error of the exchange, or ctx's error when
// ctx ended before the request was sent.
func (p *pipe) do(ctx context.Context, cmd []byte, read func(r *bufio.Reader) error) error {
	if ctx.Err() != nil {
		return async.CtxError(ctx)
	}
	r := &pipeReq{cmd: cmd, read: read}
	if p.q.Own() {
		// Free: the caller sends its own request at once. Next deferred:
		// a panic in the exchange that the caller recovers must not leave
		// the queue busy for ever.
		defer p.q.Next()
		p.exchange([]*pipeReq{r})
		return r.err
	}
	p.q.Push(r)
	if p.q.Wait(ctx, r, false) == natbatch.Dropped {
		return async.CtxError(ctx)
	}
	return r.err // sent: its reply was read to its end
}

// pending returns the number of requests queued behind the exchange in
// flight (for tests).
func (p *pipe) pending() int { return p.q.Pending() }

// exchange writes the commands of reqs in one write on one connection and
// reads their replies in order, setting each request's err. After a reply
// that cannot be placed or an I/O error, every later request gets that
// error: its outcome is unknown.
func (p *pipe) exchange(reqs []*pipeReq) {
	var buf []byte
	if len(reqs) == 1 {
		buf = reqs[0].cmd
	} else {
		n := 0
		for _, r := range reqs {
			n += len(r.cmd)
		}
		buf = make([]byte, 0, n)
		for _, r := range reqs {
			buf = append(buf, r.cmd...)
		}
	}
	read := 0
	err := p.pool.do(context.Background(), p.addr, func(rw *bufio.ReadWriter) error {
		if err := send(rw, buf); err != nil {
			return err
		}
		for _, r := range reqs {
			r.err = r.read(rw.Reader)
			read++
			if !inStep(r.err) {
				return r.err
			}
		}
		return nil
	})
	if err != nil { // a failed dial, write or read: the rest are unknown
		unread := &unreadError{cause: err}
		for _, r := range reqs[read:] {
			r.err = unread
		}
	}
}

// unreadError is the error of a request whose reply was never read: its
// outcome is unknown (ioError). Its text leaves the cause's out, so that it
// never reads as the server's answer to this request; Unwrap gives the
// cause.
type unreadError struct{ cause error }

func (e *unreadError) Error() string {
	return "memcached reply never read (the exchange failed before it): outcome unknown"
}

func (e *unreadError) Unwrap() error { return e.cause }

// pipes are a Locker's pipes, one per server, made on first use.
type pipes struct {
	pool *rawPool
	g    *async.Group
	m    sync.Map // server address → *pipe
}

// to returns the pipe to addr.
func (ps *pipes) to(addr net.Addr) *pipe {
	if p, ok := ps.m.Load(addr.String()); ok {
		return p.(*pipe)
	}
	p, _ := ps.m.LoadOrStore(addr.String(), newPipe(ps.pool, addr, ps.g))
	return p.(*pipe)
}
