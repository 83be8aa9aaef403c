package etcd

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/queuewait"
)

// An entry waits in its queue with queuewait.Await: it reads the
// predecessor (the waiter key with the highest create revision below
// ours) and watches only its deletion, then reads again, as etcd's own
// concurrency.Mutex does; one release wakes one waiter. The methods below
// and its queuewait.Member (joining the owner's hold, Head) are its
// queuewait.Queue.
var _ queuewait.Queue[backend.Lock, clientv3.WatchResponse] = (*entry)(nil)

// Look reads the predecessor (predecessor); an error deletes our key.
func (e *entry) Look(ctx context.Context) (first bool, err error) {
	e.pred, e.predRev, err = e.predecessor(ctx)
	if err != nil {
		return false, e.Fail(err)
	}
	return e.pred == nil, nil
}

// predecessor reads, in one linearizable transaction, the key just before
// ours, our own key and the first key (SetHead). It returns the predecessor
// (nil if ours is first) and the revision of the read; errRestart if our
// key is gone.
func (e *entry) predecessor(ctx context.Context) (*mvccpb.KeyValue, int64, error) {
	d := e.d
	d.stats.reads.Add(1)
	var resp *clientv3.TxnResponse
	err := d.retry(ctx, e.s, func(ctx context.Context) error {
		var err error
		resp, err = d.client.Txn(ctx).Then(
			clientv3.OpGet(e.prefix, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(e.rev-1))...),
			clientv3.OpGet(e.key),
			clientv3.OpGet(e.prefix, clientv3.WithFirstCreate()...),
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
	if heads := resp.Responses[2].GetResponseRange().GetKvs(); len(heads) > 0 {
		e.SetHead(string(heads[0].Key))
	}
	preds := resp.Responses[0].GetResponseRange().GetKvs()
	if len(preds) == 0 {
		return nil, 0, nil
	}
	return preds[0], resp.Header.Revision, nil
}

// Watch watches the predecessor's deletion from the revision after the
// read (no deletion after the read is missed). A predecessor that is an
// orphan of this driver's is deleted instead (reapOrphan): look again.
func (e *entry) Watch(ctx context.Context) (<-chan clientv3.WatchResponse, bool, error) {
	d, pred, rev := e.d, string(e.pred.Key), e.predRev
	if d.reapOrphan(ctx, e.pred) {
		return nil, true, nil
	}
	if h := d.cfg.hooks; h != nil && h.beforeWatch != nil {
		h.beforeWatch(pred, rev)
	}
	d.stats.watches.Add(1)
	return d.client.Watch(clientv3.WithRequireLeader(ctx), pred, clientv3.WithRev(rev+1), clientv3.WithFilterPut()), false, nil
}

// Event: a deletion, a compacted revision, a cancelled watch or a member
// without a leader say look again, after a short pause for the latter two:
// the next read tells where the queue stands.
func (e *entry) Event(ctx context.Context, wr clientv3.WatchResponse, ok bool) (<-chan clientv3.WatchResponse, bool, error) {
	d := e.d
	switch {
	case !ok || wr.Canceled && wr.CompactRevision == 0 || wr.Err() != nil && wr.CompactRevision == 0:
		if ctx.Err() != nil {
			return nil, false, e.Fail(async.CtxError(ctx))
		}
		if err := d.pause(ctx, 50*time.Millisecond); err != nil {
			return nil, false, e.Fail(err)
		}
		return nil, true, nil
	case wr.CompactRevision != 0:
		d.stats.compacted.Add(1)
		return nil, true, nil // compacted past rev: read again
	}
	for _, ev := range wr.Events {
		if ev.Type == mvccpb.DELETE {
			d.stats.wakeups.Add(1)
			return nil, true, nil
		}
	}
	return nil, false, nil // a put filtered out, a progress notice: wait on
}

// Grant makes our key, found first, a hold.
func (e *entry) Grant() (backend.Lock, error) { return e.d.grant(e) }

// Ends: the driver's closing, our session's loss.
func (e *entry) Ends() queuewait.Ends {
	return queuewait.Ends{Closed: e.d.ctx.Done(), ClosedErr: errClosed, Lost: e.s.deadCh, LostErr: errRestart, CtxErr: async.CtxError}
}
