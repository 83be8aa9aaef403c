package zookeeper

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"
)

// maxPublishRounds bounds the writes of one publishHolds call while other
// nested acquisitions or releases keep changing the count.
const maxPublishRounds = 8

// publishHolds writes h's current nested hold count into its node's data
// (with its owner and metadata), so that Inspect on any client sees it,
// and reports whether the node still exists in h's session: the write
// doubles as the check that a nested acquisition or release makes. Calls
// are serialised per hold, and one call writes again while the count
// changed under it, so the last write carries the latest count (requests
// of one session are applied in order). It returns false, nil when the
// node is gone or the session is lost.
func (d *driver) publishHolds(ctx context.Context, h *hold) (bool, error) {
	select {
	case h.pub <- struct{}{}:
	case <-ctx.Done():
		return false, ctxError(ctx, h.sess.conn)
	}
	defer func() { <-h.pub }()
	for range maxPublishRounds {
		d.mu.Lock()
		n := h.count
		d.mu.Unlock()
		if n == 0 {
			return true, nil // the last Release deletes the node
		}
		data := encodeNode(h.owner, h.metadata, n)
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
		case stat.EphemeralOwner != h.sess.id:
			return false, nil
		}
		d.mu.Lock()
		again := h.count != n
		d.mu.Unlock()
		if !again {
			break
		}
	}
	return true, nil
}
