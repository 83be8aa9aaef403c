package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// publishHolds writes h's current nested hold count into its key's value
// (with its owner and metadata, keeping the lease), so that Inspect on any
// client sees it, and reports whether the key still exists with its create
// revision: the write doubles as the check that a nested acquisition or
// release makes. Calls are serialised per hold, and one call writes again
// while the count changed under it, so the last write carries the latest
// count (holdtab's Publish; a count of 0 is not written: the last Release
// deletes the key).
func (d *driver) publishHolds(ctx context.Context, h *hold) (bool, error) {
	return d.table.Publish(ctx, h, func() error { return ctxErr(ctx) }, func(ctx context.Context, n int) (bool, error) {
		if hk := d.cfg.hooks; hk != nil && hk.publish != nil {
			hk.publish()
		}
		return d.ifHeld(ctx, h, clientv3.OpPut(d.keyOf(h), encodeValue(h.Owner, h.Metadata, n), clientv3.WithLease(h.sess.id)))
	})
}
