package memcached

import (
	"bufio"
	"context"
	"net"
	"sync"
	"sync/atomic"

	"github.com/distlock/distlock/internal/async"
)

// maxPipeBatch bounds the requests of one exchange, so that reading their
// replies stays far within the client's I/O timeout.
const maxPipeBatch = 512

// pipe is natural batching of the Locker's requests to one server: while
// an exchange is in flight on the Locker's connection to that server, the
// next requests queue, and the moment it is answered every queued request
// goes out together, in one write on one connection, their replies read in
// order. A lone request is never delayed: no timer, no linger; it is sent
// on the caller's goroutine. A request whose ctx ends while it is queued is
// never sent (its error is ctx's, and the caller knows nothing reached the
// server); one already sent is always read to its end (the caller waits
// for it: the driver's operations run through call, whose caller has
// returned at ctx's end already and whose late handler undoes a grant).
// The I/O of an exchange is bounded by the client's timeout, never by one
// caller's ctx, which must not cut the requests of the others.
type pipe struct {
	pool *rawPool
	addr net.Addr
	g    *async.Group

	mu   sync.Mutex
	busy bool // an exchange is in flight, or a flusher is starting
	q    []*pipeReq

	roundTrips atomic.Uint64 // exchanges written
	requests   atomic.Uint64 // requests they carried
}

// pipeReq is one request of a pipe: its command bytes and the reader of
// its reply.
type pipeReq struct {
	cmd   []byte
	read  func(r *bufio.Reader) error
	err   error
	state atomic.Int32
	done  chan struct{}
}

// The states of a pipeReq.
const (
	reqQueued int32 = iota
	reqSent
	reqDropped // its ctx ended while it was queued: never sent
)

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
	p.mu.Lock()
	if !p.busy {
		// Free: the caller sends its own request at once.
		p.busy = true
		p.mu.Unlock()
		r.state.Store(reqSent)
		p.exchange([]*pipeReq{r})
		p.next()
		return r.err
	}
	r.done = make(chan struct{})
	p.q = append(p.q, r)
	p.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
	}
	if r.state.CompareAndSwap(reqQueued, reqDropped) {
		return async.CtxError(ctx)
	}
	<-r.done // sent: its reply is read to its end
	return r.err
}

// pending returns the number of requests queued behind the exchange in
// flight (for tests).
func (p *pipe) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.q)
}

// next hands what queued during the caller's exchange to a flusher, or
// marks p free.
func (p *pipe) next() {
	p.mu.Lock()
	if len(p.q) == 0 {
		p.busy = false
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	if !p.g.Go(p.flush) {
		p.flush() // closing: no more background work
	}
}

// flush sends the queue as one exchange, again and again, until it finds
// the queue empty; then p is free.
func (p *pipe) flush() {
	var batch []*pipeReq
	for {
		p.mu.Lock()
		if len(p.q) == 0 {
			p.busy = false
			p.mu.Unlock()
			return
		}
		if len(p.q) <= maxPipeBatch {
			batch, p.q = p.q, batch[:0]
		} else {
			batch = append(batch[:0], p.q[:maxPipeBatch]...)
			p.q = append(p.q[:0], p.q[maxPipeBatch:]...)
		}
		p.mu.Unlock()
		n := 0
		for _, r := range batch {
			if r.state.CompareAndSwap(reqQueued, reqSent) {
				batch[n] = r
				n++
			}
		}
		if n > 0 {
			p.exchange(batch[:n])
			for _, r := range batch[:n] {
				close(r.done)
			}
		}
		clear(batch)
		batch = batch[:0]
	}
}

// exchange writes the commands of reqs in one write on one connection and
// reads their replies in order, setting each request's err. After a reply
// that cannot be placed or an I/O error, every later request gets that
// error: its outcome is unknown.
func (p *pipe) exchange(reqs []*pipeReq) {
	p.roundTrips.Add(1)
	p.requests.Add(uint64(len(reqs)))
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
		for _, r := range reqs[read:] {
			r.err = err
		}
	}
}

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
	p, _ := ps.m.LoadOrStore(addr.String(), &pipe{pool: ps.pool, addr: addr, g: ps.g})
	return p.(*pipe)
}
