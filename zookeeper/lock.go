package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/holdtab"
)

// lock is one acquisition's handle on a hold. Nested acquisitions of one
// owner share the hold (and its node and token) through separate handles.
type lock struct {
	holdtab.Handle
	d *driver
	h *hold
}

// Token is the czxid of the lock node: the zxid of the transaction that
// created it, strictly increasing across the ensemble, hence across
// holders, sessions and container re-creation.
func (l *lock) Token() uint64 { return l.h.token }

// ValidUntil implements backend.Deadliner: last contact with the ensemble
// plus the negotiated session timeout, less the margin — the moment the
// loss monitor would declare the session's leases lost. distlock compares it
// whenever the lease is looked at, so a holder resumed from a pause sees its
// loss before the monitor goroutine has run.
func (l *lock) ValidUntil() time.Time {
	l.d.mu.Lock()
	defer l.d.mu.Unlock()
	return l.h.sess.deadlineLocked()
}

var (
	errReleasedHandle = fmt.Errorf("%w: already released", backend.ErrNotHeld)
	errNodeGone       = fmt.Errorf("%w: lock node gone (session expired or node deleted by another client)", backend.ErrNotHeld)
)

// Release gives up one hold; the last one deletes the node. The node's
// path is unique to this acquisition (GUID and sequence), so the delete
// can never remove another owner's node.
func (l *lock) Release(ctx context.Context) error {
	d, h, s := l.d, l.h, l.h.sess
	d.mu.Lock()
	r := d.table.ReleaseLocked(h, &l.Handle)
	cause := s.cause
	d.mu.Unlock()
	switch r {
	case holdtab.Again:
		return errReleasedHandle
	case holdtab.WasLost:
		if cause != nil && s.dead {
			return fmt.Errorf("%w: %w", backend.ErrNotHeld, cause)
		}
		return errNodeGone
	case holdtab.Kept:
		lost, err := d.table.ReleaseKept(ctx, h, d.publishHolds, errNodeDeleted)
		if lost {
			return errNodeGone
		}
		return err
	}
	var sentOnce bool
	err := d.retrying(ctx, s, func(c *zk.Conn) error {
		err := c.Delete(h.path, -1)
		if errors.Is(err, zk.ErrNoNode) && sentOnce {
			return nil // an earlier attempt, cut off with its connection, deleted it
		}
		sentOnce = true
		return err
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoNode):
		return errNodeGone
	}
	// Unknown or failed: keep trying in the background until the node or
	// its session is gone.
	d.deleteNodeBG(s, h.path)
	if err = d.mapErr(s, err); errors.Is(err, errRestart) {
		return fmt.Errorf("%w: session lost", backend.ErrNotHeld)
	}
	return err
}

// Refresh verifies that the node still exists in the lock's session: the
// lock does not expire, so there is nothing to extend; ttl is ignored.
func (l *lock) Refresh(ctx context.Context, _ time.Duration) error {
	d, h := l.d, l.h
	if !d.table.Holding(h, &l.Handle) {
		return errNodeGone
	}
	held, err := d.verify(ctx, h)
	if err != nil {
		return err
	}
	if !held {
		d.table.Gone(h, errNodeDeleted, &l.Handle)
		return errNodeGone
	}
	d.mu.Lock()
	lost := h.Lost
	d.mu.Unlock()
	if lost {
		return errNodeGone
	}
	return nil
}
