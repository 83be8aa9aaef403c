package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/holdtab"
	"github.com/distlock/distlock/internal/queuewait"
)

// TryAcquire creates a node, checks whether it is first, and deletes it if
// it is not.
func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if req.Permits > 0 {
		return d.acquirePermit(ctx, req, req.Permits, false)
	}
	return d.acquire(ctx, req, false)
}

// Acquire creates a node and waits, watching only its predecessor, until
// it is first.
func (d *driver) Acquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if req.Permits > 0 {
		return d.acquirePermit(ctx, req, req.Permits, true)
	}
	return d.acquire(ctx, req, true)
}

func (d *driver) acquire(ctx context.Context, req backend.Request, wait bool) (backend.Lock, error) {
	ks := d.table.Ref(req.Key)
	defer d.table.Unref(req.Key, ks)
	parent := d.parentPath(req.Key)
	ctxErr := func() error { return d.ctxErrorNow(ctx) }
	return holdtab.Loop(ctx, wait, ctxErr,
		func() (backend.Lock, bool, error) { return d.nest(ctx, ks, req) },
		func() (backend.Lock, bool, error) {
			s, err := d.session(ctx)
			if err != nil {
				return nil, false, err
			}
			l, err := d.attempt(ctx, s, ks, parent, req, wait)
			d.unuse(s)
			return l, errors.Is(err, errRestart), err
		},
		func(t time.Duration) error { return d.pause(ctx, t, ctxErr) })
}

// nest joins the hold of the same owner on this key, if this driver has
// one: reentrancy is per Locker (one session). The new hold count is
// written into the node (publishHolds), which also checks that the node
// still exists in the session; an owner id held through another session's
// node is an ordinary competitor, not a reentrant hold.
func (d *driver) nest(ctx context.Context, ks *keyState, req backend.Request) (backend.Lock, bool, error) {
	l := &lock{d: d}
	h, ok, err := d.table.Nest(ctx, ks, req.Owner, &l.Handle, req.Lost, d.publishHolds, errNodeDeleted)
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

// verify reports whether h's node still exists in h's session.
func (d *driver) verify(ctx context.Context, h *hold) (bool, error) {
	var (
		ok   bool
		stat *zk.Stat
	)
	err := d.retrying(ctx, h.sess, func(c *zk.Conn) error {
		var err error
		ok, stat, err = c.Exists(h.path)
		return err
	})
	if err != nil {
		if err = d.mapErr(h.sess, err); errors.Is(err, errRestart) {
			return false, nil
		}
		return false, err
	}
	return ok && stat.EphemeralOwner == h.sess.id, nil
}

// entry is the node of one attempt in its key's queue.
type entry struct {
	ctx    context.Context // the acquisition's
	d      *driver
	s      *session
	ks     *keyState
	req    backend.Request
	parent string
	guid   string
	child  string // the node's name
	path   string

	// The node's stat (czxid: the fencing token; ephemeralOwner: the
	// session it belongs to), fetched alongside the first listing, with a
	// watch on the node.
	// watch fires when the node is deleted or its data changes: the hold
	// watches it for a deletion by another client (watchHold).
	stat    func() error
	exists  bool
	st      *zk.Stat
	watch   <-chan zk.Event
	checked bool

	pred string // the node just before ours that the last Look found

	// Joining the owner's hold, and its attempt at the head of the queue
	// (by guid: that of the first node the last Look found).
	queuewait.Member[backend.Lock, *hold]
}

// newEntry returns the entry of a new attempt of req on session s, under
// parent; its node is not created yet.
func (d *driver) newEntry(ctx context.Context, s *session, ks *keyState, parent string, req backend.Request) *entry {
	e := &entry{ctx: ctx, d: d, s: s, ks: ks, req: req, parent: parent, guid: newGUID()}
	e.Member = queuewait.NewMember(d.table, ks, req.Owner, &d.attempts,
		func(ctx context.Context) (backend.Lock, bool, error) { return d.nest(ctx, ks, req) }, d.headWaitHook())
	return e
}

// attempt is one acquisition on session s: protected create, then (wait)
// the recipe's loop (wait.go), or else one look: hold if first.
func (d *driver) attempt(ctx context.Context, s *session, ks *keyState, parent string, req backend.Request, wait bool) (backend.Lock, error) {
	e := d.newEntry(ctx, s, ks, parent, req)
	defer d.attempts.Start(e.guid, req.Owner)()
	child, err := d.protectedCreate(ctx, s, parent, e.guid, encodeNode(req.Owner, req.Metadata, 1))
	if err != nil {
		return nil, err
	}
	e.child, e.path = child, parent+"/"+child
	if h := d.cfg.hooks; h != nil && h.afterCreate != nil {
		h.afterCreate(e.path)
	}
	e.stat = d.start(ctx, s, func(c *zk.Conn) error {
		_, st, w, err := c.GetW(e.path)
		if errors.Is(err, zk.ErrNoNode) {
			return nil // no watch is left behind for a missing node
		}
		e.exists, e.st, e.watch = err == nil, st, w
		return err
	})
	if wait {
		return queuewait.Await(ctx, e)
	}
	first, err := e.Look(ctx)
	switch {
	case err != nil:
		return nil, err
	case !first:
		return queuewait.Refuse(ctx, e, backend.Busy(0))
	}
	return e.Grant()
}

// Fail deletes the entry's node (in the background if need be, at once
// when the acquisition's ctx has ended) and returns err.
func (e *entry) Fail(err error) error {
	e.d.deleteNode(e.ctx, e.s, e.path)
	return err
}

// position lists the parent's children and returns the node just before
// ours, "" if ours is first. Nodes of this attempt other than ours (a
// create whose outcome we could not see was applied after all) are deleted
// in the background. errRestart: the parent, or our node, is gone.
func (e *entry) position(ctx context.Context) (pred string, err error) {
	var children []string
	e.d.stats.children.Add(1)
	err = e.d.retrying(ctx, e.s, func(c *zk.Conn) error {
		var err error
		children, _, err = c.Children(e.parent)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return "", errRestart // the parent, hence our node, is gone
	}
	if err != nil {
		return "", e.Fail(e.d.mapErr(e.s, err))
	}
	ms := order(children)
	if len(ms) > 0 {
		e.SetHead(ms[0].guid)
	}
	idx := -1
	for i, m := range ms {
		switch {
		case m.name == e.child:
			idx = i
		case m.guid == e.guid:
			e.d.deleteNodeBG(e.s, e.parent+"/"+m.name)
		}
	}
	switch {
	case idx < 0:
		// Our node is gone: the session ended, or another client deleted it.
		return "", errRestart
	case idx == 0:
		return "", nil
	}
	return e.parent + "/" + ms[idx-1].name, nil
}

// checkOwner waits, once, for the node's stat and checks that the node
// belongs to our session.
func (e *entry) checkOwner() error {
	if e.checked {
		return nil
	}
	if err := e.stat(); err != nil {
		return e.Fail(e.d.mapErr(e.s, err))
	}
	e.checked = true
	if !e.exists {
		return errRestart
	}
	if e.st.EphemeralOwner != e.s.id {
		// Created in another session: go-zookeeper replaced ours after
		// it expired.
		e.d.sessionLost(e.s, fmt.Sprintf("node created in session 0x%x", e.st.EphemeralOwner))
		return e.Fail(errRestart)
	}
	return nil
}

// grant makes the first node a hold.
func (d *driver) grant(s *session, ks *keyState, req backend.Request, path string, token uint64, watch <-chan zk.Event, fail func(error) error) (backend.Lock, error) {
	d.mu.Lock()
	if s.dead {
		d.mu.Unlock()
		return nil, fail(errRestart)
	}
	if dl := s.deadlineLocked(); !dl.IsZero() && !time.Now().Before(dl) {
		d.mu.Unlock()
		d.sessionLost(s, "no contact with the ensemble before the grant")
		return nil, fail(errRestart)
	}
	h := &hold{Hold: holdtab.NewHold(req.Key, req.Owner, req.Metadata), path: path, token: token, sess: s}
	l := &lock{d: d, h: h}
	stale := d.table.GrantLocked(ks, h, &l.Handle, req.Lost)
	s.holds[h] = struct{}{}
	d.mu.Unlock()
	if watch != nil {
		d.spawn(func() { d.watchHold(h, watch) })
	}
	if stale != nil {
		// Our node is first, so the node of an earlier hold of ours is
		// gone (another client deleted it).
		d.table.Gone(stale, errNodeDeleted, nil)
	}
	return l, nil
}
