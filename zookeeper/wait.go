package zookeeper

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/queuewait"
)

// An entry waits in its queue with queuewait.Await, as the recipe says:
// list the children without a watch, hold if first, otherwise watch only
// the next-lower node's deletion and list again; one release wakes one
// waiter. The methods below and its queuewait.Member (joining the owner's
// hold, Head) are its queuewait.Queue.
var _ queuewait.Queue[backend.Lock, zk.Event] = (*entry)(nil)

// Look lists the children (position) and checks, once, that our node is
// our session's (checkOwner).
func (e *entry) Look(ctx context.Context) (first bool, err error) {
	if e.pred, err = e.position(ctx); err != nil {
		return false, err
	}
	if err := e.checkOwner(); err != nil {
		return false, err
	}
	return e.pred == "", nil
}

// Watch sets a watch on the predecessor; gone: it is gone already.
func (e *entry) Watch(ctx context.Context) (<-chan zk.Event, bool, error) {
	ch, exists, err := e.watchPredecessor(ctx)
	return ch, err == nil && !exists, err
}

// Event: the predecessor was deleted (or its watch ended otherwise): look
// again. A holder publishing a new nested hold count changes the node's
// data, which is no release: watch again.
func (e *entry) Event(ctx context.Context, ev zk.Event, _ bool) (<-chan zk.Event, bool, error) {
	if ev.Type != zk.EventNodeDataChanged {
		e.d.stats.watchEvents.Add(1)
		return nil, true, nil
	}
	return e.Watch(ctx)
}

// watchPredecessor sets a data watch on the predecessor (GetW: it fires on
// the deletion, and unlike ExistsW it leaves no watch behind on a node
// that is gone already, whose sequential name is never created again);
// exists false: it is gone already. An error has ended the attempt (its
// node deleted).
func (e *entry) watchPredecessor(ctx context.Context) (<-chan zk.Event, bool, error) {
	var (
		exists bool
		ch     <-chan zk.Event
	)
	err := e.d.retrying(ctx, e.s, func(c *zk.Conn) error {
		var err error
		_, _, ch, err = c.GetW(e.pred)
		exists = err == nil
		if errors.Is(err, zk.ErrNoNode) {
			err = nil
		}
		return err
	})
	if err != nil {
		return nil, false, e.Fail(e.d.mapErr(e.s, err))
	}
	if exists {
		e.d.stats.watches.Add(1)
	}
	return ch, exists, nil
}

// Grant makes our node, found first, a hold.
func (e *entry) Grant() (backend.Lock, error) {
	return e.d.grant(e.s, e.ks, e.req, e.path, uint64(e.st.Czxid), e.watch, e.Fail)
}

// Ends: the driver's closing, our session's loss.
func (e *entry) Ends() queuewait.Ends {
	return queuewait.Ends{
		Closed: e.d.ctx.Done(), ClosedErr: backend.ErrClosed,
		Lost: e.s.deadCh, LostErr: errRestart,
		CtxErr: func(ctx context.Context) error { return ctxError(ctx, e.s.conn) },
	}
}
