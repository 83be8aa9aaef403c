package natbatch

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/distlock/distlock/internal/async"
)

// Req is the part of a request the Queue manages: embed it in the request
// type. The zero Req is ready for Push.
type Req struct {
	state atomic.Int32
	done  chan struct{}
}

func (r *Req) natReq() *Req { return r }

// Request is a request type that embeds Req.
type Request interface{ natReq() *Req }

// The states of a Req.
const (
	queued int32 = iota
	sent
	delivered // the caller takes the answer
	dropped   // the caller's ctx ended while it was queued: never sent
	abandoned // the caller's ctx ended after it was sent: late gets it
)

// Outcome is how Wait ended.
type Outcome uint8

const (
	// Delivered: the request was sent and answered; its answer is the
	// caller's.
	Delivered Outcome = iota
	// Dropped: ctx ended while the request was queued; it was never sent.
	Dropped
	// Abandoned: ctx ended after the request was sent (Wait with abandon);
	// the Queue's late handler gets the answer.
	Abandoned
)

// Queue is natural batching of requests of type T to one server. Safe for
// concurrent use.
type Queue[T Request] struct {
	g    *async.Group
	max  int             // requests per round trip; 0: no bound
	send func(batch []T) // one round trip for batch
	late func(r T)       // the answer of a request abandoned after it was sent; may be nil

	mu   sync.Mutex
	busy bool // a round trip is in flight, or a flusher is starting
	q    []T

	roundTrips atomic.Uint64 // single requests and batches sent
	requests   atomic.Uint64 // requests they carried
}

// New returns a Queue whose batches go out through send, at most max
// requests each (0: no bound), on goroutines of g (whose Close waits for
// them; while g is closing, on the caller's goroutine). late, if not nil,
// gets the answer of each request abandoned after it was sent, on the
// flushing goroutine.
func New[T Request](g *async.Group, max int, send func(batch []T), late func(r T)) *Queue[T] {
	return &Queue[T]{g: g, max: max, send: send, late: late}
}

// Own reports whether the queue was free, and then makes it busy: the
// caller sends its own request at once, on its own goroutine, and calls
// Next when it has the answer.
func (q *Queue[T]) Own() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.busy {
		return false
	}
	q.busy = true
	q.roundTrips.Add(1)
	q.requests.Add(1)
	return true
}

// Next ends a round trip the caller sent itself (Own): it hands what
// queued meanwhile to a flusher, or makes the queue free.
func (q *Queue[T]) Next() {
	q.mu.Lock()
	if len(q.q) == 0 {
		q.busy = false
		q.mu.Unlock()
		return
	}
	q.mu.Unlock()
	if !q.g.Go(q.flush) {
		q.flush() // closing: no more background work
	}
}

// Push queues r to go out with the next round trip, starting one if the
// queue is free. Wait for its answer with Wait.
func (q *Queue[T]) Push(r T) {
	rq := r.natReq()
	rq.done = make(chan struct{})
	q.mu.Lock()
	q.q = append(q.q, r)
	start := !q.busy
	q.busy = true
	q.mu.Unlock()
	if start && !q.g.Go(q.flush) {
		q.flush() // closing: no more background work
	}
}

// Wait waits until r, pushed, is answered or ctx ends. If ctx ends while r
// is queued, r is never sent (Dropped). If it ends after r was sent, Wait
// returns Abandoned at once when abandon is set (the late handler then
// gets the answer), else it waits for the answer (Delivered).
func (q *Queue[T]) Wait(ctx context.Context, r T, abandon bool) Outcome {
	rq := r.natReq()
	select {
	case <-rq.done:
		return Delivered
	case <-ctx.Done():
	}
	if rq.state.CompareAndSwap(queued, dropped) {
		return Dropped
	}
	if abandon && rq.state.CompareAndSwap(sent, abandoned) {
		return Abandoned
	}
	<-rq.done
	return Delivered
}

// Pending returns the number of requests queued behind the round trip in
// flight (for tests and diagnostics).
func (q *Queue[T]) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.q)
}

// Busy reports whether a round trip is in flight (for tests and
// diagnostics).
func (q *Queue[T]) Busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.busy
}

// Stats returns the round trips sent (a single request or a batch each)
// and the requests they carried.
func (q *Queue[T]) Stats() (roundTrips, requests uint64) {
	return q.roundTrips.Load(), q.requests.Load()
}

// flush sends the queue, at most max requests a round trip, again and
// again until it finds the queue empty; then the queue is free.
func (q *Queue[T]) flush() {
	var batch []T
	for {
		q.mu.Lock()
		if len(q.q) == 0 {
			q.busy = false
			q.mu.Unlock()
			return
		}
		if q.max == 0 || len(q.q) <= q.max {
			batch, q.q = q.q, batch[:0]
		} else {
			batch = append(batch[:0], q.q[:q.max]...)
			q.q = append(q.q[:0], q.q[q.max:]...)
		}
		q.mu.Unlock()
		// Claim each request; one whose caller gave up while it waited
		// is never sent.
		n := 0
		for _, r := range batch {
			if r.natReq().state.CompareAndSwap(queued, sent) {
				batch[n] = r
				n++
			}
		}
		clear(batch[n:])
		if n > 0 {
			q.roundTrips.Add(1)
			q.requests.Add(uint64(n))
			q.send(batch[:n])
			for _, r := range batch[:n] {
				rq := r.natReq()
				if rq.state.CompareAndSwap(sent, delivered) {
					close(rq.done)
				} else if q.late != nil {
					q.late(r)
				}
			}
		}
		clear(batch)
		batch = batch[:0]
	}
}
