package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxPublishRounds bounds the writes of one publishHolds call while other
// nested acquisitions or releases keep changing the count.
const maxPublishRounds = 8

// publishHolds writes h's current nested hold count into its key's value
// (with its owner and metadata, keeping the lease), so that Inspect on any
// client sees it, and reports whether the key still exists with its create
// revision: the write doubles as the check that a nested acquisition or
// release makes. Calls are serialised per hold, and one call writes again
// while the count changed under it, so the last write carries the latest
// count.
func (d *driver) publishHolds(ctx context.Context, h *hold) (bool, error) {
	select {
	case h.pub <- struct{}{}:
	case <-ctx.Done():
		return false, ctxErr(ctx)
	}
	defer func() { <-h.pub }()
	for range maxPublishRounds {
		d.mu.Lock()
		n := h.count
		d.mu.Unlock()
		if n == 0 {
			return true, nil // the last Release deletes the key
		}
		held, err := d.ifHeld(ctx, h, clientv3.OpPut(h.etcdKey, encodeValue(h.owner, h.metadata, n), clientv3.WithLease(h.sess.id)))
		if err != nil || !held {
			return false, err
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
