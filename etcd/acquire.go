package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/holdtab"
	"github.com/distlock/distlock/internal/queuewait"
)

// TryAcquire creates a waiter key, holds the lock if it is the first, and
// deletes it otherwise.
func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	return d.acquire(ctx, req, false)
}

// Acquire creates a waiter key and waits, watching only its predecessor's
// deletion, until it is the first.
func (d *driver) Acquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	return d.acquire(ctx, req, true)
}

func (d *driver) acquire(ctx context.Context, req backend.Request, wait bool) (backend.Lock, error) {
	ks := d.table.Ref(req.Key)
	defer d.table.Unref(req.Key, ks)
	prefix := d.lockPrefix(req.Key)
	return holdtab.Loop(ctx, wait, func() error { return async.CtxError(ctx) },
		func() (backend.Lock, bool, error) { return d.nest(ctx, ks, req) },
		func() (backend.Lock, bool, error) {
			s, err := d.session(ctx)
			if err != nil {
				return nil, false, err
			}
			l, err := d.attempt(ctx, s, ks, prefix, req, wait)
			return l, errors.Is(err, errRestart), err
		},
		func(t time.Duration) error { return d.pause(ctx, t) })
}

// pause waits for t, unless ctx ends or the driver closes.
func (d *driver) pause(ctx context.Context, t time.Duration) error {
	timer := time.NewTimer(t)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return async.CtxError(ctx)
	case <-d.ctx.Done():
		return backend.ErrClosed
	case <-timer.C:
		return nil
	}
}

// entry is the waiter key of one attempt in its lock's queue.
type entry struct {
	ctx    context.Context // the acquisition's
	d      *driver
	s      *session
	ks     *keyState
	req    backend.Request
	prefix string
	id     waiterID
	key    string // the waiter key
	rev    int64  // its create revision

	// The predecessor the last Look found, and the revision of that read.
	pred    *mvccpb.KeyValue
	predRev int64

	// Joining the owner's hold, and its attempt at the head of the queue
	// (by waiter key: the first the create or the last Look found).
	queuewait.Member[backend.Lock, *hold]
}

// newEntry returns the entry of a new attempt of req on session s, in the
// queue under prefix; its waiter key is not created yet.
func (d *driver) newEntry(ctx context.Context, s *session, ks *keyState, prefix string, req backend.Request) *entry {
	id := newID()
	e := &entry{ctx: ctx, d: d, s: s, ks: ks, req: req, prefix: prefix, id: id, key: waiterKey(prefix, int64(s.id), id)}
	e.Member = queuewait.NewMember(d.table, ks, req.Owner, &d.attempts,
		func(ctx context.Context) (backend.Lock, bool, error) { return d.nest(ctx, ks, req) }, d.headWaitHook())
	return e
}

// attempt is one acquisition on session s: create the waiter key, hold if
// it is the first, else (wait) watch the predecessor until it is.
func (d *driver) attempt(ctx context.Context, s *session, ks *keyState, prefix string, req backend.Request, wait bool) (backend.Lock, error) {
	e := d.newEntry(ctx, s, ks, prefix, req)
	defer d.attempts.Start(e.key, req.Owner)()
	first, err := e.create(ctx)
	if err != nil {
		return nil, err
	}
	e.SetHead(string(first.Key))
	if first.CreateRevision == e.rev {
		return d.grant(e)
	}
	if d.reapOrphan(ctx, first) {
		// An orphan of ours was first: where do we stand now?
		if first, err := e.Look(ctx); err != nil {
			return nil, err
		} else if first {
			return d.grant(e)
		}
	}
	if !wait {
		return queuewait.Refuse(ctx, e, backend.Busy(0))
	}
	return queuewait.Await(ctx, e)
}

// Fail deletes the entry's key (in the background if need be) and returns
// err.
func (e *entry) Fail(err error) error {
	e.d.deleteKey(e.ctx, e.s, e.key, e.rev)
	return err
}

// grant makes the first waiter key a hold.
func (d *driver) grant(e *entry) (backend.Lock, error) {
	s, ks, req := e.s, e.ks, e.req
	d.mu.Lock()
	if s.dead {
		d.mu.Unlock()
		return nil, e.Fail(errRestart)
	}
	if dl := s.deadlineLocked(); !time.Now().Before(dl) {
		d.mu.Unlock()
		d.sessionLost(s, "no keepalive answered before the grant")
		return nil, e.Fail(errRestart)
	}
	h := &hold{Hold: holdtab.NewHold(req.Key, req.Owner, req.Metadata), id: e.id, token: e.rev, sess: s}
	l := &lock{d: d, h: h}
	stale := d.table.GrantLocked(ks, h, &l.Handle, req.Lost)
	start := d.watchLocked(h)
	d.mu.Unlock()
	if start {
		d.startHoldWatch()
	}
	if stale != nil {
		// Our key is first, so the key of an earlier hold of ours is
		// gone (another client deleted it).
		d.table.Gone(stale, errKeyGone, nil)
	}
	return l, nil
}

// nest joins the hold of the same owner on this key, if this driver has
// one: reentrancy is per Locker (one session). The new hold count is
// written into the key's value (publishHolds), which also checks that the
// key still exists; an owner id held through another Locker's key is an
// ordinary competitor, not a reentrant hold.
func (d *driver) nest(ctx context.Context, ks *keyState, req backend.Request) (backend.Lock, bool, error) {
	l := &lock{d: d}
	h, ok, err := d.table.Nest(ctx, ks, req.Owner, &l.Handle, req.Lost, d.publishHolds, errKeyGone)
	l.h = h
	if err != nil {
		d.spawn(func() {
			ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
			defer cancel()
			_ = l.Release(ctx)
		})
		return nil, false, err
	}
	if !ok {
		return nil, false, nil
	}
	return l, true, nil
}
