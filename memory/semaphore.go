package memory

import (
	"container/list"
	"context"
	"fmt"
	"time"

	"github.com/distlock/distlock/backend"
)

// Semaphores (Locker.Semaphore): a table of permit holders per key,
// beside the lock table and independent of it. Expired holders are dropped
// whenever the key is looked at; each permit given back or dropped wakes
// one watcher of the key (Watch with Request.Permits), the longest
// watching without a wake-up pending, and a woken watcher that leaves
// hands its wake-up on. Tokens come from a per-key counter of its own that
// outlives the semaphore (Fencing). Permits are session-bound as locks
// are: Crash and Close give them back at once.

var _ interface {
	backend.Permitter
	backend.Notifier
} = (*driver)(nil)

// semTable holds a namespace's semaphores. Guarded by Namespace.mu.
type semTable struct {
	sems     map[string]*semaphore
	fences   map[string]uint64
	watchers map[string]*list.List // of *semWatch, in arrival order
}

type semaphore struct {
	permits int
	holders map[*permit]struct{}
}

// permit is one held permit, and the backend.Lock of its holder.
type permit struct {
	d       *driver
	key     string
	token   uint64
	expires time.Time
	issued  time.Time
	lost    func(error)
}

// semWatch is one watcher of a semaphore's permits.
type semWatch struct {
	ch    chan struct{}
	el    *list.Element // nil once cancelled
	woken bool          // sent a wake-up: its leaving hands one on
}

func (ns *Namespace) semTable() *semTable {
	if ns.semt.sems == nil {
		ns.semt = semTable{sems: map[string]*semaphore{}, fences: map[string]uint64{}, watchers: map[string]*list.List{}}
	}
	return &ns.semt
}

// PermitCapabilities implements backend.Permitter: Fencing, Notify,
// SessionBound, Expiring.
func (d *driver) PermitCapabilities() (backend.Capabilities, error) {
	return backend.Capabilities{Fencing: true, Notify: true, SessionBound: true, Expiring: true}, nil
}

// current returns key's semaphore with its expired holders dropped (their
// leases are not told: their own deadline has passed), nil when none is
// held. Callers hold ns.mu.
func (t *semTable) current(key string, now time.Time) *semaphore {
	s := t.sems[key]
	if s == nil {
		return nil
	}
	freed := 0
	for p := range s.holders {
		if !now.Before(p.expires) {
			delete(s.holders, p)
			freed++
		}
	}
	t.wake(key, freed)
	if len(s.holders) == 0 {
		delete(t.sems, key)
		return nil
	}
	return s
}

// wake tells n watchers of key that n permits came free: the first n, in
// arrival order, without a wake-up pending (one pending will try anyway).
// Callers hold ns.mu.
func (t *semTable) wake(key string, n int) {
	ws := t.watchers[key]
	if ws == nil {
		return
	}
	for e := ws.Front(); e != nil && n > 0; e = e.Next() {
		w := e.Value.(*semWatch)
		select {
		case w.ch <- struct{}{}:
			w.woken = true
			n--
		default:
		}
	}
}

// tryAcquirePermit takes one of req.Permits permits of req.Key.
func (d *driver) tryAcquirePermit(ctx context.Context, req backend.Request) (backend.Lock, error) {
	permits := req.Permits
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ns := d.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if d.closed {
		return nil, backend.ErrClosed
	}
	t := ns.semTable()
	now := time.Now()
	s := t.current(req.Key, now)
	if s == nil {
		s = &semaphore{permits: permits, holders: map[*permit]struct{}{}}
		t.sems[req.Key] = s
	}
	if s.permits != permits {
		return nil, &backend.PermitsError{Key: req.Key, Have: s.permits, Want: permits}
	}
	if len(s.holders) >= permits {
		first := time.Time{}
		for p := range s.holders {
			if first.IsZero() || p.expires.Before(first) {
				first = p.expires
			}
		}
		return nil, backend.Busy(first.Sub(now))
	}
	t.fences[req.Key]++
	p := &permit{d: d, key: req.Key, token: t.fences[req.Key], expires: now.Add(req.TTL), issued: now, lost: req.Lost}
	s.holders[p] = struct{}{}
	return p, nil
}

// Watch implements backend.Notifier for permits: each permit of req.Key
// given back or dropped wakes one watcher, in arrival order, and a woken
// watcher's cancel hands a wake-up on. Locks wait in Acquire's queue, so
// their releases are not announced (a nil channel).
func (d *driver) Watch(_ context.Context, req backend.Request) (<-chan struct{}, func()) {
	if req.Permits == 0 {
		return nil, nil
	}
	key := req.Key
	ns := d.ns
	w := &semWatch{ch: make(chan struct{}, 1)}
	ns.mu.Lock()
	t := ns.semTable()
	ws := t.watchers[key]
	if ws == nil {
		ws = list.New()
		t.watchers[key] = ws
	}
	w.el = ws.PushBack(w)
	ns.mu.Unlock()
	return w.ch, func() {
		ns.mu.Lock()
		defer ns.mu.Unlock()
		if w.el == nil {
			return
		}
		ws.Remove(w.el)
		w.el = nil
		if ws.Len() == 0 {
			delete(t.watchers, key)
		}
		if w.woken {
			t.wake(key, 1)
		}
	}
}

// held returns p's semaphore if p is still one of its holders. Callers
// hold ns.mu.
func (p *permit) held(now time.Time) *semaphore {
	s := p.d.ns.semTable().current(p.key, now)
	if s == nil {
		return nil
	}
	if _, ok := s.holders[p]; !ok {
		return nil
	}
	return s
}

var errPermitNotHeld = fmt.Errorf("%w: the permit expired or was given back", backend.ErrNotHeld)

func (p *permit) Token() uint64       { return p.token }
func (p *permit) IssuedAt() time.Time { return p.issued }

func (p *permit) Refresh(_ context.Context, ttl time.Duration) error {
	ns := p.d.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	now := time.Now()
	if p.held(now) == nil {
		return errPermitNotHeld
	}
	if exp := now.Add(ttl); exp.After(p.expires) {
		p.expires = exp
	}
	return nil
}

func (p *permit) Release(context.Context) error {
	ns := p.d.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	now := time.Now()
	s := p.held(now)
	if s == nil {
		return errPermitNotHeld
	}
	delete(s.holders, p)
	if len(s.holders) == 0 {
		delete(ns.semt.sems, p.key)
	}
	ns.semt.wake(p.key, 1)
	return nil
}

// endPermits gives back every permit of session d and returns the Lost
// callbacks of their holders. Callers hold ns.mu.
func (ns *Namespace) endPermits(d *driver) []func(error) {
	var lost []func(error)
	t := &ns.semt
	for key, s := range t.sems {
		n := len(s.holders)
		for p := range s.holders {
			if p.d == d {
				delete(s.holders, p)
				if p.lost != nil {
					lost = append(lost, p.lost)
				}
			}
		}
		t.wake(key, n-len(s.holders))
		if len(s.holders) == 0 {
			delete(t.sems, key)
		}
	}
	return lost
}
