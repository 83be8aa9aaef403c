package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/backend"
)

// sessServer is the session model's lock server: a session-bound lock
// service in the manner of PostgreSQL advisory locks or MySQL SELECT … FOR
// UPDATE on a pinned connection. A lock belongs to a session; it has no
// expiry of its own and is freed when its session ends — closed by its
// client, killed (pg_terminate_backend, KILL, restart), ended by an idle
// timeout (no command within sessTimeout), or by a forced release, which
// ends the holder's session. Fencing tokens come from a per-key counter that
// outlives the lock.
type sessServer struct {
	mu       sync.Mutex
	next     uint64
	alive    map[uint64]time.Time // live session → its last command
	ended    map[uint64]time.Time // ended session → when
	why      map[uint64]string    // ended session → why
	locks    map[string]sessRec   // key → holder
	fences   map[string]uint64
	grants   map[string]map[uint64]sessRec // key → token → the grant
	timeout  time.Duration
	sealed   bool
	lateReqs []string
}

type sessRec struct {
	owner string
	token uint64
	sess  uint64
}

func newSessServer(timeout time.Duration) *sessServer {
	return &sessServer{
		alive:   map[uint64]time.Time{},
		ended:   map[uint64]time.Time{},
		why:     map[uint64]string{},
		locks:   map[string]sessRec{},
		fences:  map[string]uint64{},
		grants:  map[string]map[uint64]sessRec{},
		timeout: timeout,
	}
}

// tick ends the sessions idle past the timeout. Callers hold s.mu.
func (s *sessServer) tick(now time.Time) {
	for id, last := range s.alive {
		if now.Sub(last) >= s.timeout {
			s.endLocked(id, last.Add(s.timeout), "idle timeout")
		}
	}
}

// endLocked ends session id at the moment at, freeing its locks. Callers
// hold s.mu.
func (s *sessServer) endLocked(id uint64, at time.Time, why string) {
	if _, ok := s.alive[id]; !ok {
		return
	}
	delete(s.alive, id)
	s.ended[id] = at
	s.why[id] = why
	for key, r := range s.locks {
		if r.sess == id {
			delete(s.locks, key)
		}
	}
}

// arrive records a request's arrival and runs the idle timeout; it reports
// false once the run is sealed. Callers hold s.mu.
func (s *sessServer) arrive(what string) bool {
	if s.sealed {
		s.lateReqs = append(s.lateReqs, what)
		return false
	}
	s.tick(time.Now())
	return true
}

// openLock opens a session and takes key in it, in one round trip (a
// pinned connection's first statement). A busy key closes the session
// again. It returns the session, the grant and whether it was granted.
func (s *sessServer) openLock(key, owner string) (uint64, uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.arrive("open+lock " + key) {
		return 0, 0, false
	}
	if _, held := s.locks[key]; held {
		return 0, 0, false
	}
	s.next++
	id := s.next
	s.alive[id] = time.Now()
	s.fences[key]++
	r := sessRec{owner: owner, token: s.fences[key], sess: id}
	s.locks[key] = r
	if s.grants[key] == nil {
		s.grants[key] = map[uint64]sessRec{}
	}
	s.grants[key][r.token] = r
	return id, r.token, true
}

// holds reports whether session id is alive and holds key with token: a
// keepalive or a join's check, run on the session itself (so it counts as
// its last command).
func (s *sessServer) holds(id uint64, key string, token uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.arrive("check " + key) {
		return false
	}
	if _, ok := s.alive[id]; !ok {
		return false
	}
	s.alive[id] = time.Now()
	r, ok := s.locks[key]
	return ok && r.sess == id && r.token == token
}

// close ends session id at its client's request and reports whether it
// still held key with token.
func (s *sessServer) close(id uint64, key string, token uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.arrive("close " + key) {
		return false
	}
	r, ok := s.locks[key]
	held := ok && r.sess == id && r.token == token
	s.endLocked(id, time.Now(), "closed by its client")
	return held
}

// kill ends a live session picked by pick (a server-side end the client is
// not told of) and returns it, or 0.
func (s *sessServer) kill(pick func(n int) int, why string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sealed || len(s.alive) == 0 {
		return 0
	}
	ids := make([]uint64, 0, len(s.alive))
	for id := range s.alive {
		ids = append(ids, id)
	}
	// The ids come in map order: a replay of a seed may end another
	// session than the first run did (the interleaving varies anyway).
	id := ids[pick(len(ids))]
	s.endLocked(id, time.Now(), why)
	return id
}

// forceRelease ends the session holding key, if any (an operator's forced
// release through another client).
func (s *sessServer) forceRelease(key string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sealed {
		return 0
	}
	r, ok := s.locks[key]
	if !ok {
		return 0
	}
	s.endLocked(r.sess, time.Now(), "forced release of "+key)
	return r.sess
}

// sessDriver is a session-bound backend.Driver over the session server:
// the reference form of what postgres mode=advisory and mysql
// mode=forupdate do (internal/sqllock). Each held key has a local entry
// (its pinned session, its token and its holds); a same-owner acquisition
// joins the entry — after the server has confirmed, on the entry's session,
// that it still holds the lock — and otherwise the entry's leases are lost
// and the acquisition is a new one. A keepalive checks every entry's session
// each sessKeepalive and reports a dead one through Request.Lost; the locks
// keep a local deadline (backend.Deadliner): last confirmed contact plus
// the session timeout, less a margin. Requests cross a network that delays
// them and can be cut (a cut drops them).
//
// oldJoin re-creates the defect of issue 30 item 1 for the model to find:
// a join trusts the local entry and asks the server nothing.
type sessDriver struct {
	srv     *sessServer
	oldJoin bool

	mu       sync.Mutex
	rng      *rand.Rand
	maxDelay time.Duration
	cut      bool
	entries  map[string]*sessEntry // key → this driver's current entry
	all      map[*sessEntry]bool   // entries with holds, current or not
	undos    atomic.Int64
	pending  atomic.Int64
	closed   bool
	stop     chan struct{}
	stopped  chan struct{}
}

type sessEntry struct {
	key, owner  string
	sess, token uint64
	lastOK      time.Time // the send time of the last command the server confirmed
	holds       map[*sessHold]bool
	dead        bool
}

type sessHold struct {
	d    *sessDriver
	e    *sessEntry
	lost func(error)
	done bool
}

const (
	sessTimeout   = 150 * time.Millisecond // the server's idle timeout
	sessKeepalive = 20 * time.Millisecond
	sessMargin    = 30 * time.Millisecond
)

func newSessDriver(srv *sessServer, rng *rand.Rand, oldJoin bool) *sessDriver {
	d := &sessDriver{srv: srv, oldJoin: oldJoin, rng: rng, entries: map[string]*sessEntry{}, all: map[*sessEntry]bool{},
		stop: make(chan struct{}), stopped: make(chan struct{})}
	go d.keepalive()
	return d
}

func (d *sessDriver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, SessionBound: true}
}

// setNet sets the network's delay and whether it is cut.
func (d *sessDriver) setNet(maxDelay time.Duration, cut bool) {
	d.mu.Lock()
	d.maxDelay, d.cut = maxDelay, cut
	d.mu.Unlock()
}

// sessCall runs op on the server after a random delay and returns its
// result after another, or fails when ctx ends first. A cut network drops
// the request.
func sessCall[T any](ctx context.Context, d *sessDriver, op func() T) (T, error) {
	d.mu.Lock()
	cut := d.cut
	up := time.Duration(d.rng.Int64N(int64(d.maxDelay) + 1))
	down := time.Duration(d.rng.Int64N(int64(d.maxDelay) + 1))
	d.mu.Unlock()
	reply := make(chan T, 1)
	if !cut {
		d.pending.Add(1)
		time.AfterFunc(up, func() {
			r := op()
			time.AfterFunc(down, func() { reply <- r; d.pending.Add(-1) })
		})
	}
	select {
	case r := <-reply:
		return r, nil
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%w: no reply: %w", backend.ErrUnavailable, context.Cause(ctx))
	}
}

func (d *sessDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %w", backend.ErrUnavailable, ctx.Err())
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, backend.ErrClosed
	}
	e := d.entries[req.Key]
	d.mu.Unlock()
	if e != nil && e.owner == req.Owner {
		if d.oldJoin {
			d.mu.Lock()
			if !e.dead && len(e.holds) > 0 {
				h := &sessHold{d: d, e: e, lost: req.Lost}
				e.holds[h] = true
				d.mu.Unlock()
				return h, nil
			}
			d.mu.Unlock()
		} else {
			sent := time.Now()
			ok, err := sessCall(ctx, d, func() bool { return d.srv.holds(e.sess, e.key, e.token) })
			if err != nil {
				return nil, err
			}
			d.mu.Lock()
			if ok && !e.dead && len(e.holds) > 0 {
				if sent.After(e.lastOK) {
					e.lastOK = sent
				}
				h := &sessHold{d: d, e: e, lost: req.Lost}
				e.holds[h] = true
				d.mu.Unlock()
				return h, nil
			}
			d.mu.Unlock()
			if !ok {
				d.lose(e, "the join found the session ended")
			}
		}
	}
	sent := time.Now()
	type grant struct {
		sess, token uint64
		ok          bool
	}
	g, err := sessCall(ctx, d, func() grant {
		s, t, ok := d.srv.openLock(req.Key, req.Owner)
		return grant{s, t, ok}
	})
	if err != nil {
		// The outcome is unknown: end whatever session the request opened,
		// in the background. (The model server ends sessions by id; the
		// undo ends the one this request opened if it arrived, found by
		// its key and owner among the live grants of no entry.)
		d.undoLater(req.Key, req.Owner)
		return nil, err
	}
	if !g.ok {
		return nil, backend.Busy(0)
	}
	e = &sessEntry{key: req.Key, owner: req.Owner, sess: g.sess, token: g.token, lastOK: sent, holds: map[*sessHold]bool{}}
	h := &sessHold{d: d, e: e, lost: req.Lost}
	e.holds[h] = true
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.srv.close(g.sess, req.Key, g.token)
		return nil, backend.ErrClosed
	}
	d.entries[req.Key] = e
	d.all[e] = true
	d.mu.Unlock()
	return h, nil
}

// undoLater ends, once the request has certainly arrived or been dropped,
// any session holding key for owner that no entry of this driver knows.
func (d *sessDriver) undoLater(key, owner string) {
	d.undos.Add(1)
	time.AfterFunc(3*d.maxDelayNow()+time.Millisecond, func() {
		defer d.undos.Add(-1)
		d.srv.mu.Lock()
		r, ok := d.srv.locks[key]
		d.srv.mu.Unlock()
		if !ok || r.owner != owner {
			return
		}
		d.mu.Lock()
		known := false
		for e := range d.all {
			known = known || e.sess == r.sess
		}
		d.mu.Unlock()
		if !known {
			d.srv.close(r.sess, key, r.token)
		}
	})
}

func (d *sessDriver) maxDelayNow() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.maxDelay
}

// lose ends entry e: its leases are told through Request.Lost.
func (d *sessDriver) lose(e *sessEntry, why string) {
	d.mu.Lock()
	if e.dead {
		d.mu.Unlock()
		return
	}
	e.dead = true
	if d.entries[e.key] == e {
		delete(d.entries, e.key)
	}
	delete(d.all, e)
	var lost []func(error)
	for h := range e.holds {
		if h.lost != nil {
			lost = append(lost, h.lost)
		}
	}
	d.mu.Unlock()
	for _, f := range lost {
		f(fmt.Errorf("%w: %s", backend.ErrLockLost, why))
	}
}

// keepalive checks every entry's session each sessKeepalive.
func (d *sessDriver) keepalive() {
	defer close(d.stopped)
	t := time.NewTicker(sessKeepalive)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		d.mu.Lock()
		es := make([]*sessEntry, 0, len(d.all))
		for e := range d.all {
			es = append(es, e)
		}
		d.mu.Unlock()
		for _, e := range es {
			ctx, cancel := context.WithTimeout(context.Background(), sessKeepalive)
			sent := time.Now()
			ok, err := sessCall(ctx, d, func() bool { return d.srv.holds(e.sess, e.key, e.token) })
			cancel()
			switch {
			case err != nil: // no contact: the local deadline runs on
			case ok:
				d.mu.Lock()
				if sent.After(e.lastOK) {
					e.lastOK = sent
				}
				d.mu.Unlock()
			default:
				d.lose(e, "the keepalive found the session ended")
			}
		}
	}
}

func (h *sessHold) Token() uint64 { return h.e.token }

// ValidUntil implements backend.Deadliner.
func (h *sessHold) ValidUntil() time.Time {
	h.d.mu.Lock()
	defer h.d.mu.Unlock()
	return h.e.lastOK.Add(sessTimeout - sessMargin)
}

func (h *sessHold) Refresh(ctx context.Context, _ time.Duration) error {
	e := h.e
	sent := time.Now()
	ok, err := sessCall(ctx, h.d, func() bool { return h.d.srv.holds(e.sess, e.key, e.token) })
	if err != nil {
		return err
	}
	if !ok {
		h.d.lose(e, "a refresh found the session ended")
		return fmt.Errorf("%w: session ended", backend.ErrNotHeld)
	}
	h.d.mu.Lock()
	if sent.After(e.lastOK) {
		e.lastOK = sent
	}
	h.d.mu.Unlock()
	return nil
}

// Release gives up the hold; the last one closes the session.
func (h *sessHold) Release(ctx context.Context) error {
	d, e := h.d, h.e
	d.mu.Lock()
	if h.done || e.dead {
		d.mu.Unlock()
		return fmt.Errorf("%w: released or lost", backend.ErrNotHeld)
	}
	h.done = true
	delete(e.holds, h)
	last := len(e.holds) == 0
	if last {
		e.dead = true
		if d.entries[e.key] == e {
			delete(d.entries, e.key)
		}
		delete(d.all, e)
	}
	d.mu.Unlock()
	if !last {
		return nil
	}
	held, err := sessCall(ctx, d, func() bool { return d.srv.close(e.sess, e.key, e.token) })
	if err != nil {
		d.undos.Add(1)
		go func() {
			defer d.undos.Add(-1)
			d.srv.close(e.sess, e.key, e.token)
		}()
		return err
	}
	if !held {
		return fmt.Errorf("%w: session had ended", backend.ErrNotHeld)
	}
	return nil
}

// Close stops the keepalive and closes every session (the pool closes its
// connections).
func (d *sessDriver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	es := make([]*sessEntry, 0, len(d.all))
	for e := range d.all {
		es = append(es, e)
	}
	d.mu.Unlock()
	close(d.stop)
	<-d.stopped
	for _, e := range es {
		d.srv.close(e.sess, e.key, e.token)
		d.lose(e, "driver closed")
	}
	return nil
}

func (d *sessDriver) Inspect(context.Context, string) (backend.LockInfo, error) {
	return backend.LockInfo{}, errors.ErrUnsupported
}

func (d *sessDriver) ForceRelease(context.Context, string, backend.Holder) (backend.LockInfo, error) {
	return backend.LockInfo{}, errors.ErrUnsupported
}
