package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock/backend"
)

// notifyServer is the notify model's lock server: expiring locks whose
// every release is published on the release channel of every client
// (pub/sub, in the manner of redis). The locks are reached without faults;
// only the notification channels are cut and healed.
type notifyServer struct {
	mu      sync.Mutex
	locks   map[string]notifyRec
	fences  map[string]uint64
	free    map[string]time.Time // key → free since (absent: held)
	clients []*notifyDriver
}

type notifyRec struct {
	owner   string
	token   uint64
	expires time.Time
}

func newNotifyServer() *notifyServer {
	return &notifyServer{locks: map[string]notifyRec{}, fences: map[string]uint64{}, free: map[string]time.Time{}}
}

// live returns key's holder at now. Callers hold s.mu.
func (s *notifyServer) live(key string, now time.Time) (notifyRec, bool) {
	r, ok := s.locks[key]
	if ok && !now.Before(r.expires) {
		delete(s.locks, key)
		s.free[key] = r.expires
		ok = false
	}
	return r, ok
}

func (s *notifyServer) acquire(key, owner string, ttl time.Duration) (uint64, time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	r, held := s.live(key, now)
	switch {
	case !held:
		s.fences[key]++
		r = notifyRec{owner: owner, token: s.fences[key], expires: now.Add(ttl)}
		s.locks[key] = r
		delete(s.free, key)
	case r.owner == owner:
		if exp := now.Add(ttl); exp.After(r.expires) {
			r.expires = exp
			s.locks[key] = r
		}
	default:
		return 0, r.expires.Sub(now), false
	}
	return r.token, 0, true
}

func (s *notifyServer) refresh(key, owner string, token uint64, ttl time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	r, held := s.live(key, now)
	if !held || r.owner != owner || r.token != token {
		return false
	}
	if exp := now.Add(ttl); exp.After(r.expires) {
		r.expires = exp
		s.locks[key] = r
	}
	return true
}

// release frees key and publishes it to every client whose channel is up.
func (s *notifyServer) release(key, owner string, token uint64) bool {
	s.mu.Lock()
	r, held := s.live(key, time.Now())
	if !held || r.owner != owner || r.token != token {
		s.mu.Unlock()
		return false
	}
	delete(s.locks, key)
	s.free[key] = time.Now()
	clients := s.clients
	s.mu.Unlock()
	for _, c := range clients {
		c.publish(key)
	}
	return true
}

// notifyDriver is a backend.Driver with a backend.Notifier over a
// notification channel (a subscriber connection) that the model cuts and
// heals. Watch while the channel is up registers at once; while it is
// down it waits for the channel up to a confirm timeout or ctx, and then
// returns a channel that never fires (as the Notifier contract allows and
// redissub does). A release while the channel is down is lost; a heal wakes
// every registered watcher (messages may have been lost), unless
// dropHealWake re-creates the defect of issue 30 item 4.
type notifyDriver struct {
	srv          *notifyServer
	idx          int
	dropHealWake bool
	onWatch      func(registered bool) // told of every Watch's outcome, if set

	mu       sync.Mutex
	up       bool
	upCh     chan struct{} // closed at the next heal
	lastHeal time.Time
	watchers map[*notifyWatch]bool
}

type notifyWatch struct {
	key string
	ch  chan struct{}
	at  time.Time
	w   *notifyWaiter // the Acquire it serves, if the ctx says
}

// notifyWaiter is an Acquire under way, found by the model's Watch through
// its ctx.
type notifyWaiter struct {
	key   string
	c     int
	start time.Time
	ctx   context.Context
}

type notifyWaiterKey struct{}

// notifyConfirm is how long Watch waits for a channel that is down.
const notifyConfirm = 10 * time.Millisecond

var notifyNever = make(chan struct{})

func newNotifyDriver(srv *notifyServer, idx int, dropHealWake bool) *notifyDriver {
	d := &notifyDriver{srv: srv, idx: idx, dropHealWake: dropHealWake, up: true, upCh: make(chan struct{}), watchers: map[*notifyWatch]bool{}}
	srv.mu.Lock()
	srv.clients = append(srv.clients, d)
	srv.mu.Unlock()
	return d
}

func (d *notifyDriver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, Expiring: true, Notify: true}
}

func (d *notifyDriver) Close() error { return nil }

// setUp cuts (false) or heals (true) the notification channel.
func (d *notifyDriver) setUp(up bool) {
	d.mu.Lock()
	if d.up == up {
		d.mu.Unlock()
		return
	}
	d.up = up
	var wake []*notifyWatch
	if up {
		d.lastHeal = time.Now()
		close(d.upCh)
		d.upCh = make(chan struct{})
		if !d.dropHealWake {
			for w := range d.watchers {
				wake = append(wake, w)
			}
		}
	}
	d.mu.Unlock()
	for _, w := range wake {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

func (d *notifyDriver) publish(key string) {
	d.mu.Lock()
	var wake []*notifyWatch
	if d.up {
		for w := range d.watchers {
			if w.key == key {
				wake = append(wake, w)
			}
		}
	}
	d.mu.Unlock()
	for _, w := range wake {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

var _ backend.Notifier = (*notifyDriver)(nil)

func (d *notifyDriver) Watch(ctx context.Context, req backend.Request) (<-chan struct{}, func()) {
	key := req.Key
	t := time.NewTimer(notifyConfirm)
	defer t.Stop()
	for {
		d.mu.Lock()
		if d.up {
			w := &notifyWatch{key: key, ch: make(chan struct{}, 1), at: time.Now()}
			w.w, _ = ctx.Value(notifyWaiterKey{}).(*notifyWaiter)
			d.watchers[w] = true
			d.mu.Unlock()
			if d.onWatch != nil {
				d.onWatch(true)
			}
			var once sync.Once
			return w.ch, func() {
				once.Do(func() {
					d.mu.Lock()
					delete(d.watchers, w)
					d.mu.Unlock()
				})
			}
		}
		upCh := d.upCh
		d.mu.Unlock()
		select {
		case <-upCh:
		case <-t.C:
			if d.onWatch != nil {
				d.onWatch(false)
			}
			return notifyNever, func() {}
		case <-ctx.Done():
			return notifyNever, func() {}
		}
	}
}

func (d *notifyDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	token, busy, ok := d.srv.acquire(req.Key, req.Owner, req.TTL)
	if !ok {
		return nil, backend.Busy(busy)
	}
	return &notifyLock{d: d, key: req.Key, owner: req.Owner, token: token}, nil
}

type notifyLock struct {
	d     *notifyDriver
	key   string
	owner string
	token uint64
}

func (l *notifyLock) Token() uint64 { return l.token }

func (l *notifyLock) Refresh(_ context.Context, ttl time.Duration) error {
	if !l.d.srv.refresh(l.key, l.owner, l.token, ttl) {
		return fmt.Errorf("%w: refresh refused", backend.ErrNotHeld)
	}
	return nil
}

func (l *notifyLock) Release(context.Context) error {
	if !l.d.srv.release(l.key, l.owner, l.token) {
		return fmt.Errorf("%w: release refused", backend.ErrNotHeld)
	}
	return nil
}

func (d *notifyDriver) Inspect(context.Context, string) (backend.LockInfo, error) {
	return backend.LockInfo{}, errors.ErrUnsupported
}

func (d *notifyDriver) ForceRelease(context.Context, string, backend.Holder) (backend.LockInfo, error) {
	return backend.LockInfo{}, errors.ErrUnsupported
}
