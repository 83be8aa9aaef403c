package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/backend"
)

// Semaphores (Locker.Semaphore) follow Curator's InterProcessSemaphoreV2: an
// admission lock admits waiters one at a time, in arrival order, and each
// permit is an ephemeral-sequential lease node. A permit lasts as long as
// its session (SessionBound); its token is its node's czxid (Fencing).

// The internal keys of a semaphore: 0xFF never occurs in a valid UTF-8
// key, so they never name a user's lock.
const (
	semLockKey  = "\xffsem-admit\xff"
	semLeaseKey = "\xffsem-leases\xff"
	semHoldKey  = "\xffsem-permit\xff" // + the attempt's GUID: the keyState of one permit
)

var _ backend.Permitter = (*driver)(nil)

// PermitCapabilities implements backend.Permitter: Fencing, Notify,
// SessionBound, Durable. TryAcquire and Acquire take a permit when
// Request.Permits is set (acquirePermit).
func (d *driver) PermitCapabilities() (backend.Capabilities, error) {
	return backend.Capabilities{Fencing: true, Notify: true, SessionBound: true, Durable: true}, nil
}

func (d *driver) acquirePermit(ctx context.Context, req backend.Request, permits int, wait bool) (backend.Lock, error) {
	admit, err := d.acquire(ctx, backend.Request{Key: semLockKey + req.Key, Owner: newGUID(), TTL: req.TTL}, wait)
	if err != nil {
		return nil, err
	}
	defer func() {
		// At once, not in the background, while ctx lives: a
		// permit TryAcquire right after this one returns must not find the
		// admission lock still taken. A release that fails here, or that
		// ctx cut short (a caller whose ctx has ended does not wait for
		// the server), is finished in the background by the lock's own
		// Release (deleteNodeBG).
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = admit.Release(rctx)
	}()
	s, err := d.session(ctx)
	if err != nil {
		return nil, err
	}
	defer d.unuse(s)
	// A lost session (errRestart) took the admission lock with it: the
	// attempt fails (transient) rather than retrying outside the lock.
	return d.lease(ctx, s, req, permits, wait)
}

// lease creates this acquisition's lease node and waits, if asked, until
// it is among the first permits; see above.
func (d *driver) lease(ctx context.Context, s *session, req backend.Request, permits int, wait bool) (backend.Lock, error) {
	parent := d.parentPath(semLeaseKey + req.Key)
	guid := newGUID()
	child, err := d.protectedCreate(ctx, s, parent, guid, encodeNode(req.Owner, req.Metadata, 1))
	if err != nil {
		return nil, err
	}
	path := parent + "/" + child
	// A failed lease deletes its node (at once, in the background once
	// ctx has ended: deleteNode).
	fail := func(err error) error {
		d.deleteNode(ctx, s, path)
		return err
	}
	for {
		var (
			children []string
			changed  <-chan zk.Event
			data     []byte
		)
		err := d.retrying(ctx, s, func(c *zk.Conn) error {
			var err error
			if children, _, changed, err = c.ChildrenW(parent); err != nil {
				return err
			}
			data, _, err = c.Get(parent)
			return err
		})
		if err != nil {
			if errors.Is(err, zk.ErrNoNode) {
				err = errRestart // the parent, hence our node, is gone
			}
			return nil, fail(d.mapErr(s, err))
		}
		n, ours := 0, false
		for _, name := range children {
			if _, ok := parseMember(name); ok {
				n++
				ours = ours || name == child
			}
		}
		if !ours {
			return nil, errRestart // our node is gone: the session ended
		}
		have, _ := strconv.Atoi(string(data))
		switch {
		case n == 1 && have != permits:
			// The only lease: the count is ours to set.
			if err := d.retrying(ctx, s, func(c *zk.Conn) error {
				_, err := c.Set(parent, []byte(strconv.Itoa(permits)), -1)
				return err
			}); err != nil {
				return nil, fail(d.mapErr(s, err))
			}
		case have != permits:
			return nil, fail(&backend.PermitsError{Key: req.Key, Have: have, Want: permits})
		}
		if n <= permits {
			return d.grantPermit(ctx, s, req, path, fail)
		}
		if !wait {
			return nil, fail(backend.Busy(0))
		}
		if h := d.cfg.hooks; h != nil && h.permitWait != nil {
			h.permitWait()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fail(ctxError(ctx, s.conn))
		case <-d.ctx.Done():
			return nil, fail(backend.ErrClosed)
		case <-s.deadCh:
			return nil, fail(errRestart)
		}
	}
}

// grantPermit makes the lease node at path a hold of its own (a keyState
// of its own: permits of one semaphore in one session do not nest), with
// the node's czxid as its token and a watch for its deletion.
func (d *driver) grantPermit(ctx context.Context, s *session, req backend.Request, path string, fail func(error) error) (backend.Lock, error) {
	var (
		st    *zk.Stat
		watch <-chan zk.Event
	)
	err := d.retrying(ctx, s, func(c *zk.Conn) error {
		var err error
		_, st, watch, err = c.GetW(path)
		return err
	})
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return nil, errRestart
	case err != nil:
		return nil, fail(d.mapErr(s, err))
	case st.EphemeralOwner != s.id:
		d.sessionLost(s, fmt.Sprintf("node created in session 0x%x", st.EphemeralOwner))
		return nil, fail(errRestart)
	}
	key := semHoldKey + path
	ks := d.table.Ref(key)
	defer d.table.Unref(key, ks)
	return d.grant(s, ks, backend.Request{Key: key, Owner: req.Owner, Metadata: req.Metadata, Lost: req.Lost}, path, uint64(st.Czxid), watch, fail)
}
