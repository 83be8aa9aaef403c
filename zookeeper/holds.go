package zookeeper

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"
)

// publishHolds writes h's current nested hold count into its node's data,
// for Inspect, and reports whether the node still exists in h's session
// (false, nil when it is gone or the session lost). The last write carries
// the latest count.
func (d *driver) publishHolds(ctx context.Context, h *hold) (bool, error) {
	return d.table.Publish(ctx, h, func() error { return ctxError(ctx, h.sess.conn) }, func(ctx context.Context, n int) (bool, error) {
		if hk := d.cfg.hooks; hk != nil && hk.publish != nil {
			hk.publish()
		}
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
