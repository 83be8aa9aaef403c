package zookeeper

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"
)

// publishHolds writes h's current nested hold count into its node's data
// (with its owner and metadata), so that Inspect on any client sees it,
// and reports whether the node still exists in h's session: the write
// doubles as the check that a nested acquisition or release makes. Calls
// are serialised per hold, and one call writes again while the count
// changed under it, so the last write carries the latest count (requests
// of one session are applied in order). It returns false, nil when the
// node is gone or the session is lost. A count of 0 is not written
// (holdtab's Publish): the last Release deletes the node.
func (d *driver) publishHolds(ctx context.Context, h *hold) (bool, error) {
	return d.table.Publish(ctx, h, func() error { return ctxError(ctx, h.sess.conn) }, func(ctx context.Context, n int) (bool, error) {
		data := encodeNode(h.Owner, h.Metadata, n)
		var stat *zk.Stat
		err := d.retrying(ctx, h.sess, func(c *zk.Conn) error {
			var err error
			stat, err = c.Set(h.path, data, -1)
			return err
		})
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return false, nil
		case err != nil:
			if err = d.mapErr(h.sess, err); errors.Is(err, errRestart) {
				return false, nil
			}
			return false, err
		}
		return stat.EphemeralOwner == h.sess.id, nil
	})
}
