package etcd

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchHold ends h with ErrLockLost (its handles' Lost callbacks) as soon
// as its key is deleted while h is still held: another client deleted it
// (ForceRelease, or by hand). It watches the key's deletions from the
// revision after rev, at which the key existed; after a compaction, or a
// watch the member cancelled, it checks that the key still exists and
// watches again from the revision of that check. It returns when the key
// is deleted, the hold ends (detachLocked cancels ctx) or the driver
// closes.
func (d *driver) watchHold(ctx context.Context, h *hold, rev int64) {
	for ctx.Err() == nil {
		wch := d.client.Watch(clientv3.WithRequireLeader(ctx), h.etcdKey, clientv3.WithRev(rev+1), clientv3.WithFilterPut())
		rev = d.awaitHoldDelete(ctx, h, wch)
		if rev < 0 {
			return
		}
		if ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// awaitHoldDelete reads wch until h's key is deleted (-1: done) or the
// watch ends; then it returns the revision to watch from next, after
// checking that the key still exists (-1 if it does not).
func (d *driver) awaitHoldDelete(ctx context.Context, h *hold, wch clientv3.WatchChan) int64 {
	for wr := range wch {
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				d.table.Gone(h, errKeyGone, nil)
				return -1
			}
		}
		if wr.Canceled || wr.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return -1
	}
	cctx, cancel := context.WithTimeout(ctx, createTry)
	defer cancel()
	resp, err := d.client.Get(cctx, h.etcdKey)
	switch {
	case err != nil:
		return h.token // watch again from the start: nothing is missed
	case len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != h.token:
		d.table.Gone(h, errKeyGone, nil)
		return -1
	}
	return resp.Header.Revision
}
