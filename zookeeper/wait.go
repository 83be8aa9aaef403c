package zookeeper

import (
	"context"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/backend"
)

// awaitPredecessor watches pred, the node just before ours, and waits until
// it is deleted (done false: look at the queue again). It ends the attempt
// (done true) when ctx ends, the driver closes or the session is lost
// (deleting our node), or when this driver got a hold on the key for our
// owner (changed), which the attempt then joins instead of queueing.
func (e *entry) awaitPredecessor(ctx context.Context, pred string, changed <-chan struct{}) (l backend.Lock, done bool, err error) {
	d, s := e.d, e.s
	var (
		exists bool
		ch     <-chan zk.Event
	)
	err = d.retrying(ctx, s, func(c *zk.Conn) error {
		var err error
		exists, _, ch, err = c.ExistsW(pred)
		return err
	})
	if err != nil {
		return nil, true, e.fail(d.mapErr(s, err))
	}
	if !exists {
		return nil, false, nil
	}
	d.stats.watches.Add(1)
	for {
		select {
		case <-ch:
			d.stats.watchEvents.Add(1)
			return nil, false, nil
		case <-ctx.Done():
			return nil, true, e.fail(ctxError(ctx, s.conn))
		case <-d.ctx.Done():
			return nil, true, e.fail(backend.ErrClosed)
		case <-s.deadCh:
			return nil, true, e.fail(errRestart)
		case <-changed:
			// This driver got a hold on the key: if it is our owner's,
			// nest in it and leave the queue.
			d.mu.Lock()
			h := e.ks.hold
			changed = e.ks.changed
			same := h != nil && !h.lost && h.owner == e.req.Owner
			d.mu.Unlock()
			if same {
				if l, ok, err := d.nest(ctx, e.ks, e.req); ok || err != nil {
					d.deleteNode(s, e.path)
					return l, true, err
				}
			}
		}
	}
}
