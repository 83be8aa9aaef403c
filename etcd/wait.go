package etcd

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
)

// await waits until the entry's key is the first of its queue: it reads
// the predecessor (the waiter key with the highest create revision below
// ours) and watches only its deletion, then reads again, as etcd's own
// concurrency.Mutex does; one release wakes one waiter. It ends the attempt
// (deleting the key) when ctx ends, the driver closes or the session is
// lost, and joins a hold of the same owner that this driver got meanwhile.
func (e *entry) await(ctx context.Context) (backend.Lock, error) {
	d := e.d
	for {
		changed := d.table.Changed(e.ks)
		pred, rev, err := e.predecessor(ctx)
		if err != nil {
			return nil, e.fail(err)
		}
		if pred == nil {
			return d.grant(e)
		}
		if d.reapOrphan(ctx, pred) {
			continue
		}
		if l, done, err := e.watchDelete(ctx, string(pred.Key), rev, changed); done {
			return l, err
		}
	}
}

// predecessor reads, in one linearizable transaction, the key just before
// ours and our own key. It returns the predecessor (nil if ours is first)
// and the revision of the read; errRestart if our key is gone.
func (e *entry) predecessor(ctx context.Context) (*mvccpb.KeyValue, int64, error) {
	d := e.d
	d.stats.reads.Add(1)
	var resp *clientv3.TxnResponse
	err := d.retry(ctx, e.s, func(ctx context.Context) error {
		var err error
		resp, err = d.client.Txn(ctx).Then(
			clientv3.OpGet(e.prefix, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(e.rev-1))...),
			clientv3.OpGet(e.key),
		).Commit()
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	own := resp.Responses[1].GetResponseRange().GetKvs()
	if len(own) == 0 || own[0].CreateRevision != e.rev {
		return nil, 0, errRestart // deleted: lease ended, or an operator
	}
	preds := resp.Responses[0].GetResponseRange().GetKvs()
	if len(preds) == 0 {
		return nil, 0, nil
	}
	return preds[0], resp.Header.Revision, nil
}

// watchDelete watches pred from the revision after rev (no deletion after
// the read is missed) until it is deleted (done false: read again). A
// compacted revision, a cancelled watch or a member without a leader also
// returns done false, after a short pause for the latter two: the next read
// tells where the queue stands.
func (e *entry) watchDelete(ctx context.Context, pred string, rev int64, changed <-chan struct{}) (l backend.Lock, done bool, err error) {
	d, s := e.d, e.s
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	if h := d.cfg.hooks; h != nil && h.beforeWatch != nil {
		h.beforeWatch(pred, rev)
	}
	d.stats.watches.Add(1)
	wch := d.client.Watch(wctx, pred, clientv3.WithRev(rev+1), clientv3.WithFilterPut())
	for {
		select {
		case wr, ok := <-wch:
			switch {
			case !ok || wr.Canceled && wr.CompactRevision == 0 || wr.Err() != nil && wr.CompactRevision == 0:
				if ctx.Err() != nil {
					return nil, true, e.fail(async.CtxError(ctx))
				}
				if err := d.pause(ctx, 50*time.Millisecond); err != nil {
					return nil, true, e.fail(err)
				}
				return nil, false, nil
			case wr.CompactRevision != 0:
				d.stats.compacted.Add(1)
				return nil, false, nil // compacted past rev: read again
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					d.stats.wakeups.Add(1)
					return nil, false, nil
				}
			}
		case <-ctx.Done():
			return nil, true, e.fail(async.CtxError(ctx))
		case <-d.ctx.Done():
			return nil, true, e.fail(errClosed)
		case <-s.deadCh:
			return nil, true, e.fail(errRestart)
		case <-changed:
			// This driver got a hold on the key: if it is our owner's,
			// nest in it and leave the queue.
			var same bool
			changed, same = d.table.Joinable(e.ks, e.req.Owner)
			if same {
				if l, ok, err := d.nest(ctx, e.ks, e.req); ok || err != nil {
					e.d.deleteKey(ctx, s, e.key, e.rev)
					return l, true, err
				}
			}
		}
	}
}
