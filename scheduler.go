package distlock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock/backend"
)

// The scheduler keeps every expiring lease of one Locker in a heap ordered
// by its next event: the automatic refresh (ttl/3 after the last
// successful one was sent, or halfway to the deadline if that is sooner) or
// the local validity deadline. One runtime timer is armed
// for the earliest event; when it fires, due refreshes go to at most
// maxRefreshWorkers goroutines (in batches where the driver can pipeline
// them) and passed deadlines end their leases. No goroutine waits between
// events, adding or removing a lease is a heap operation (and a timer reset
// only when the earliest event moves earlier), and goroutines do not grow
// with the number of leases.
type scheduler struct {
	l *Locker

	mu      sync.Mutex
	h       leaseHeap
	timer   *time.Timer // fires s.fire; nil until first needed
	armed   bool        // timer is set, for armedAt
	armedAt time.Time
	queue   []*Lease // refreshes waiting for a worker
	workers int
	stopped bool           // Close ran: no new worker starts
	wg      sync.WaitGroup // workers
	// failing holds the error of the latest automatic refresh of each
	// scheduled lease whose refreshes fail, until one succeeds or the
	// lease leaves the heap: healthy leases have no entry.
	failing map[*Lease]error
}

const (
	maxRefreshWorkers = 8
	refreshChunk      = 128 // leases a worker takes at once (one batch)
)

// add schedules a lease just granted with its request sent at sent. It
// reports false if the validity had already ended when the grant arrived.
func (s *scheduler) add(ls *Lease, sent time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls.slot.deadline = sent.Add(ls.slot.validity)
	if !ls.slot.deadline.After(time.Now()) {
		return false
	}
	ls.slot.refreshAt = refreshTime(sent, ls.slot.ttl, ls.slot.validity, ls.auto)
	ls.setNext()
	heap.Push(&s.h, ls)
	s.arm()
	return true
}

// coalesce is how early a refresh may run to share a batch with one that is
// due now: 1/60 of the TTL (so refreshes come at most 5% more often than
// every ttl/3), at most 25ms. With many leases this turns a trickle of
// one-lease refreshes into full batches.
func coalesce(ttl time.Duration) time.Duration {
	return min(ttl/60, 25*time.Millisecond)
}

// refreshTime is when a lease refreshed (or granted) at sent with ttl and
// validity refreshes next: ttl/3 later, or halfway to the deadline when the
// validity is less than 2/3 of the ttl. It is strictly before the deadline
// (sent + validity), and strictly after sent unless the validity is 1ns.
func refreshTime(sent time.Time, ttl, validity time.Duration, auto bool) time.Time {
	if !auto {
		return time.Time{}
	}
	return sent.Add(min(max(ttl/3, 1), validity/2))
}

// refreshNext reports whether the lease's next event is its refresh (not its
// deadline). Callers hold s.mu.
func (ls *Lease) refreshNext() bool {
	return !ls.slot.inflight && !ls.slot.refreshAt.IsZero() && ls.slot.refreshAt.Before(ls.slot.deadline)
}

// setNext recomputes the heap key. Callers hold s.mu.
func (ls *Lease) setNext() {
	ls.slot.next = ls.slot.deadline
	if ls.refreshNext() {
		ls.slot.next = ls.slot.refreshAt
	}
}

func (s *scheduler) remove(ls *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failing) > 0 {
		delete(s.failing, ls)
	}
	if ls.slot.idx >= 0 {
		heap.Remove(&s.h, int(ls.slot.idx))
		// A timer set for the removed lease fires early and re-arms (or,
		// with the heap empty, stays off): cheaper than resetting it on
		// every release, and a Locker that acquires and releases in a loop
		// then sets no timer at all, since the next lease's event comes
		// after the one the timer is still set for.
	}
}

// refreshed records a successful refresh sent at sent with ttl and its
// validity: the lease is held until sent + validity at least, whatever other
// refreshes (with other TTLs) did meanwhile. A manual refresh (auto false)
// also makes ttl the lease's TTL for later automatic refreshes, and leaves
// the in-flight mark of an automatic one alone. It reports false, changing
// nothing, if the lease is no longer scheduled: ended, or taken off the heap
// because its deadline passed (it is being ended).
func (s *scheduler) refreshed(ls *Lease, sent time.Time, ttl, validity time.Duration, auto bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if auto {
		ls.slot.inflight = false
	}
	if ls.slot.idx < 0 {
		return false
	}
	if len(s.failing) > 0 {
		delete(s.failing, ls)
	}
	if !auto {
		ls.slot.ttl, ls.slot.validity = ttl, validity
	}
	if d := sent.Add(validity); d.After(ls.slot.deadline) {
		ls.slot.deadline = d
	}
	ls.slot.refreshAt = refreshTime(sent, ttl, validity, ls.auto)
	ls.setNext()
	heap.Fix(&s.h, int(ls.slot.idx))
	s.arm()
	return true
}

// retryLater records an automatic refresh that failed at now with err and
// may be retried before the deadline.
func (s *scheduler) retryLater(ls *Lease, now time.Time, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls.slot.inflight = false
	if ls.slot.idx < 0 {
		return
	}
	if s.failing == nil {
		s.failing = map[*Lease]error{}
	}
	s.failing[ls] = err
	pause := max(min(ls.slot.validity/10, ls.slot.deadline.Sub(now)/3), 5*time.Millisecond)
	ls.slot.refreshAt = now.Add(pause)
	ls.setNext()
	heap.Fix(&s.h, int(ls.slot.idx))
	s.arm()
}

// arm sets the timer for the earliest event, or stops it when there is
// none. A timer already set for an earlier time is left alone: it re-arms
// when it fires. Callers hold s.mu.
func (s *scheduler) arm() {
	if len(s.h) == 0 {
		if s.armed {
			s.timer.Stop()
			s.armed = false
		}
		return
	}
	next := s.h[0].slot.next
	if s.armed && !next.Before(s.armedAt) {
		return
	}
	d := time.Until(next)
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.fire)
	} else {
		s.timer.Reset(d)
	}
	s.armed, s.armedAt = true, next
}

// fire handles every due event, then re-arms the timer.
func (s *scheduler) fire() {
	s.mu.Lock()
	s.armed = false
	now := time.Now()
	expired, due := s.collect(now)
	why := make([]error, len(expired))
	for i, ls := range expired {
		why[i] = s.expiredLocked(ls, now)
		delete(s.failing, ls)
	}
	for due > 0 && !s.stopped && s.workers < maxRefreshWorkers && len(s.queue) > 0 {
		s.workers++
		s.wg.Add(1)
		go s.worker()
		due -= refreshChunk
	}
	s.arm()
	s.mu.Unlock()
	for i, ls := range expired {
		ls.end(why[i], endLost)
	}
}

// expiredLocked is the error of a lease whose validity deadline passed at
// now: errExpired, saying why the refreshes did not keep it (the latest
// automatic refresh's error, or the refresh in flight that had no answer).
// Callers hold s.mu.
func (s *scheduler) expiredLocked(ls *Lease, now time.Time) error {
	if err := s.failing[ls]; err != nil {
		if ls.slot.inflight {
			return fmt.Errorf("%w (the refresh in flight had no answer; the one before failed: %v)", errExpired, err)
		}
		return fmt.Errorf("%w (the last automatic refresh failed: %v)", errExpired, err)
	}
	if ls.slot.inflight {
		if ago := now.Sub(ls.slot.refreshAt); ago > 0 {
			return fmt.Errorf("%w (no answer to the automatic refresh sent about %v before)", errExpired, ago.Round(time.Millisecond))
		}
		return fmt.Errorf("%w (no answer to the automatic refresh in flight)", errExpired)
	}
	return errExpired
}

// collect takes the leases whose deadline has passed at now off the heap
// and queues the refreshes due by now. Callers hold s.mu.
func (s *scheduler) collect(now time.Time) (expired []*Lease, due int) {
	for len(s.h) > 0 {
		ls := s.h[0]
		if !ls.slot.deadline.After(now) {
			heap.Pop(&s.h)
			expired = append(expired, ls)
			continue
		}
		if !ls.refreshNext() || ls.slot.refreshAt.After(now.Add(coalesce(ls.slot.ttl))) {
			break // not due: a deadline ahead, or a refresh beyond the slack
		}
		ls.slot.inflight = true
		ls.setNext()
		heap.Fix(&s.h, 0)
		s.queue = append(s.queue, ls)
		due++
	}
	return expired, due
}

// worker drains the refresh queue in chunks and exits when it is empty.
func (s *scheduler) worker() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		n := min(len(s.queue), refreshChunk)
		if n == 0 {
			s.workers--
			s.mu.Unlock()
			return
		}
		batch := make([]*Lease, n)
		copy(batch, s.queue[:n])
		s.queue = s.queue[n:]
		if len(s.queue) == 0 {
			s.queue = nil
		}
		s.mu.Unlock()
		s.refresh(batch)
	}
}

// refresh runs the automatic refresh of a batch of leases.
func (s *scheduler) refresh(batch []*Lease) {
	s.mu.Lock()
	items := make([]backend.RefreshItem, len(batch))
	validity := make([]time.Duration, len(batch)) // what each refresh asks for, whatever a manual Refresh changes meanwhile
	earliest := batch[0].slot.deadline
	for i, ls := range batch {
		items[i] = backend.RefreshItem{Lock: ls.lock, TTL: ls.slot.ttl}
		validity[i] = ls.slot.validity
		if ls.slot.deadline.Before(earliest) {
			earliest = ls.slot.deadline
		}
	}
	s.mu.Unlock()
	// A refresh that cannot finish before the deadline is useless: bound it.
	// Close ends it at once.
	ctx, cancel := context.WithDeadline(s.l.closeCtx, earliest)
	defer cancel()
	sent := time.Now()
	stopWarning := warnUnanswered(batch, sent, earliest)
	var errs []error
	if s.l.batcher != nil && len(items) > 1 {
		errs = s.l.batcher.RefreshBatch(ctx, items)
	} else {
		errs = make([]error, len(items))
		for i, it := range items {
			errs[i] = it.Lock.Refresh(ctx, it.TTL)
		}
	}
	stopWarning()
	// Cut off by the deadline, not by Close: say so in its errors.
	timedOut := ctx.Err() != nil && s.l.closeCtx.Err() == nil
	for i, ls := range batch {
		var err error
		if i < len(errs) {
			err = s.l.classify(errs[i])
		} else {
			err = fmt.Errorf("%w: driver returned %d results for %d refreshes", ErrUnavailable, len(errs), len(items))
		}
		if err != nil && timedOut && !errors.Is(err, ErrNotHeld) {
			err = fmt.Errorf("no answer within %v, by the validity deadline: %w", time.Since(sent).Round(time.Millisecond), err)
		}
		ls.refreshed(items[i].TTL, true, err)
		switch {
		case err == nil:
			s.refreshed(ls, sent, items[i].TTL, validity[i], true)
		case errors.Is(err, ErrNotHeld):
			ls.end(refused(err), endLost)
		default:
			s.retryLater(ls, time.Now(), err)
		}
	}
}

// warnUnanswered arranges for the loggers of the leases of batch (those
// that have one) to hear, halfway from sent to deadline, that the
// automatic refresh sent at sent has no answer yet; the returned func
// cancels it once the answer came.
func warnUnanswered(batch []*Lease, sent, deadline time.Time) (stop func()) {
	var logged []*Lease
	for _, ls := range batch {
		if ls.w != nil && ls.w.log != nil {
			logged = append(logged, ls)
		}
	}
	if len(logged) == 0 {
		return func() {}
	}
	t := time.AfterFunc(deadline.Sub(sent)/2, func() {
		for _, ls := range logged {
			ls.mu.Lock()
			h := ls.state == held
			ls.mu.Unlock()
			if h {
				ls.w.unanswered(time.Since(sent))
			}
		}
	})
	return func() { t.Stop() }
}

// stop stops the timer and lets no new refresh worker start. It is called
// by Close after every lease has ended; Close then waits for s.wg.
func (s *scheduler) stop() {
	s.mu.Lock()
	s.stopped = true
	if s.timer != nil {
		s.timer.Stop()
		s.armed = false
	}
	s.mu.Unlock()
}

// slot is a lease's place in its Locker's scheduler: what the scheduler
// needs to refresh it in time and to end it at its deadline. Every field is
// guarded by scheduler.mu.
type slot struct {
	ttl       time.Duration // of the last acquire or refresh
	validity  time.Duration // of ttl (backend.TTLPolicy)
	deadline  time.Time     // local validity deadline; zero: no expiry
	refreshAt time.Time
	next      time.Time // min(refreshAt, deadline): the heap's key
	idx       int32     // heap index, -1 when not scheduled (int32: packed with inflight)
	inflight  bool      // an automatic refresh is running
}

// leaseHeap orders leases by their next event.
type leaseHeap []*Lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].slot.next.Before(h[j].slot.next) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].slot.idx, h[j].slot.idx = int32(i), int32(j)
}
func (h *leaseHeap) Push(x any) {
	ls := x.(*Lease)
	ls.slot.idx = int32(len(*h))
	*h = append(*h, ls)
}
func (h *leaseHeap) Pop() any {
	old := *h
	ls := old[len(old)-1]
	old[len(old)-1] = nil
	ls.slot.idx = -1
	*h = old[:len(old)-1]
	return ls
}
