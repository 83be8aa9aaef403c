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
	ch, exists, err := e.watchPredecessor(ctx, pred)
	if err != nil || !exists {
		return nil, err != nil, err
	}
	for {
		select {
		case ev := <-ch:
			if ev.Type != zk.EventNodeDataChanged {
				d.stats.watchEvents.Add(1)
				return nil, false, nil
			}
			// The holder published a new nested hold count: watch again.
			if ch, exists, err = e.watchPredecessor(ctx, pred); err != nil || !exists {
				return nil, err != nil, err
			}
		case <-ctx.Done():
			return nil, true, e.fail(ctxError(ctx, s.conn))
		case <-d.ctx.Done():
			return nil, true, e.fail(backend.ErrClosed)
		case <-s.deadCh:
			return nil, true, e.fail(errRestart)
		case <-changed:
			// This driver got a hold on the key: if it is our owner's,
			// nest in it and leave the queue.
			var same bool
			changed, same = d.table.Joinable(e.ks, e.req.Owner)
			if same {
				if l, ok, err := d.nest(ctx, e.ks, e.req); ok || err != nil {
					d.deleteNode(s, e.path)
					return l, true, err
				}
			}
		}
	}
}

// watchPredecessor sets an exists watch on pred; exists false: it is gone
// already. An error has ended the attempt (its node deleted).
func (e *entry) watchPredecessor(ctx context.Context, pred string) (<-chan zk.Event, bool, error) {
	var (
		exists bool
		ch     <-chan zk.Event
	)
	err := e.d.retrying(ctx, e.s, func(c *zk.Conn) error {
		var err error
		exists, _, ch, err = c.ExistsW(pred)
		return err
	})
	if err != nil {
		return nil, false, e.fail(e.d.mapErr(e.s, err))
	}
	if exists {
		e.d.stats.watches.Add(1)
	}
	return ch, exists, nil
}
