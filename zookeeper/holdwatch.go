package zookeeper

import (
	"errors"

	"github.com/go-zookeeper/zk"
)

// watchHold ends h with ErrLockLost (its handles' Lost callbacks) as soon
// as its node is deleted while h is still held: another client deleted it
// (ForceRelease, or by hand). ch is the exists watch set on the node when
// it was created; a data change (publishHolds) sets it again. It returns
// when the node is deleted, the watch ends with the session or connection,
// the hold ends, or the driver closes.
func (d *driver) watchHold(h *hold, ch <-chan zk.Event) {
	for {
		var ev zk.Event
		select {
		case ev = <-ch:
		case <-h.sess.deadCh:
			return
		case <-d.ctx.Done():
			return
		}
		if !d.holding(h) {
			return
		}
		switch ev.Type {
		case zk.EventNodeDeleted:
			d.table.Gone(h, errNodeDeleted, nil)
			return
		case zk.EventNodeDataChanged, zk.EventNodeCreated:
		default:
			return // the watch ended with the session or connection
		}
		err := d.retrying(d.ctx, h.sess, func(c *zk.Conn) error {
			var err error
			_, _, ch, err = c.GetW(h.path)
			return err
		})
		switch {
		case errors.Is(err, zk.ErrNoNode) && d.holding(h):
			d.table.Gone(h, errNodeDeleted, nil)
			return
		case err != nil:
			return // Refresh and Release still check the node
		}
	}
}

// holding reports whether h is still a live hold.
func (d *driver) holding(h *hold) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !h.Lost && h.Count > 0
}
