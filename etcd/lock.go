package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/holdtab"
)

// lock is one acquisition's handle on a hold. Nested acquisitions of one
// owner share the hold (and its key and token) through separate handles.
type lock struct {
	holdtab.Handle
	d *driver
	h *hold
}

// Token is the create revision of the holder's waiter key: the cluster's
// revision when it was written, strictly increasing across every key of
// the cluster, hence across holders, sessions, restarts and leader
// changes.
func (l *lock) Token() uint64 { return uint64(l.h.token) }

// ValidUntil implements backend.Deadliner: the send time of the session's
// latest answered keepalive plus the lease TTL, less the margin — the
// moment the keepalive loop would declare the session lost. A lost hold
// returns a moment in the past.
func (l *lock) ValidUntil() time.Time {
	l.d.mu.Lock()
	defer l.d.mu.Unlock()
	if l.h.Lost {
		return l.h.sess.contact
	}
	return l.h.sess.deadlineLocked()
}

var errReleasedHandle = fmt.Errorf("%w: already released", backend.ErrNotHeld)

// errNotHeld is the error of Release and Refresh on a hold that is gone.
func (l *lock) errNotHeld() error {
	s := l.h.sess
	l.d.mu.Lock()
	cause := s.cause
	l.d.mu.Unlock()
	if cause != nil {
		return fmt.Errorf("%w: %w", backend.ErrNotHeld, cause)
	}
	return fmt.Errorf("%w: lock key gone (deleted by another client, or the session ended)", backend.ErrNotHeld)
}

// Release gives up one hold; the last one deletes the key, compared on its
// create revision, so it can never delete another owner's key.
func (l *lock) Release(ctx context.Context) error {
	d, h := l.d, l.h
	d.mu.Lock()
	r := d.table.ReleaseLocked(h, &l.Handle)
	d.mu.Unlock()
	switch r {
	case holdtab.Again:
		return errReleasedHandle
	case holdtab.WasLost:
		return l.errNotHeld()
	case holdtab.Kept:
		lost, err := d.table.ReleaseKept(ctx, h, d.publishHolds, errKeyGone)
		if lost {
			return l.errNotHeld()
		}
		return err
	}
	key := d.keyOf(h)
	held, err := d.ifHeld(ctx, h, clientv3.OpDelete(key))
	switch {
	case err != nil:
		// Unknown: delete it in the background (compared on its
		// create revision) until that succeeds or the session ends.
		d.deleteKey(ctx, h.sess, key, h.token)
		return err
	case !held:
		return l.errNotHeld()
	}
	return nil
}

// Refresh checks that the key still exists with its create revision: the
// lock lives as long as the session's lease, which the keepalive renews;
// ttl is ignored.
func (l *lock) Refresh(ctx context.Context, _ time.Duration) error {
	d, h := l.d, l.h
	if !d.table.Holding(h, &l.Handle) {
		return l.errNotHeld()
	}
	held, err := d.ifHeld(ctx, h)
	if err != nil {
		return err
	}
	if !held {
		d.table.Gone(h, errKeyGone, &l.Handle)
		return l.errNotHeld()
	}
	return nil
}

// ifHeld runs ops in a transaction if h's key still exists with its create
// revision, and reports whether it did. The transaction is resent while
// the session lives and its answer was lost (it is idempotent: a delete
// resent after it was applied finds the key gone, which counts as held).
//
// The transaction is always linearizable: without ops it reads the key
// (count only). A transaction of compares alone counts as a serializable
// read for etcd (every one of its, zero, range requests is serializable),
// which the member that receives it answers from its own state, without
// asking the leader: a follower that has not applied a deletion yet, or a
// member cut off from the majority, would confirm a lock that is gone.
func (d *driver) ifHeld(ctx context.Context, h *hold, ops ...clientv3.Op) (bool, error) {
	key := d.keyOf(h)
	if len(ops) == 0 {
		ops = []clientv3.Op{clientv3.OpGet(key, clientv3.WithCountOnly())}
	}
	var (
		resp *clientv3.TxnResponse
		sent bool
		prev bool
	)
	err := d.retry(ctx, h.sess, func(ctx context.Context) error {
		prev = sent
		sent = true
		var err error
		resp, err = d.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", h.token)).
			Then(ops...).Commit()
		return err
	})
	switch {
	case errors.Is(err, errRestart):
		return false, nil // the session ended: so did the key
	case err != nil:
		return false, err
	}
	return resp.Succeeded || prev && isDelete(ops), nil
}

func isDelete(ops []clientv3.Op) bool { return len(ops) == 1 && ops[0].IsDelete() }
