package etcd

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/internal/async"
)

func randRead(b []byte) { _, _ = rand.Read(b) }

// createTry bounds one send of the create transaction: a member that does
// not answer (paused, partitioned) is given up and the transaction sent
// again, which the client may route to another member.
const createTry = 2 * time.Second

// create puts the entry's waiter key with the session lease, in one
// transaction with a read of the first waiter, and returns the first
// waiter; e.rev is set to the key's create revision.
//
// The transaction puts only if the key does not exist yet, so sending it
// again is harmless: a send whose answer was lost (timeout, connection
// reset, leader change) is resent until one is answered, and a resend that
// finds the key (the earlier send was applied) reads its create revision
// and adopts it — the waiter key's name carries the attempt's random id,
// so it can only be ours. When ctx ends or the session is lost before an
// answer, the key is deleted in the background on a schedule that outlasts
// a delayed request (undoCreate).
func (e *entry) create(ctx context.Context) (first *mvccpb.KeyValue, err error) {
	d, s := e.d, e.s
	val := encodeValue(e.req.Owner, e.req.Metadata, 1)
	txn := func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return d.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(e.key), "=", 0)).
			Then(clientv3.OpPut(e.key, val, clientv3.WithLease(s.id)), clientv3.OpGet(e.prefix, clientv3.WithFirstCreate()...)).
			Else(clientv3.OpGet(e.key), clientv3.OpGet(e.prefix, clientv3.WithFirstCreate()...)).
			Commit()
	}
	for try := 0; ; try++ {
		d.stats.creates.Add(1)
		tctx, cancel := context.WithTimeout(ctx, createTry)
		resp, err := txn(tctx)
		timedOut := tctx.Err() != nil // the server may report it as code Unknown
		cancel()
		if h := d.cfg.hooks; h != nil && h.afterCreate != nil && err == nil {
			h.afterCreate(e.key)
		}
		switch {
		case err == nil:
			return e.created(resp)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			// Nothing was written: the lease is gone.
			d.sessionLost(s, "the cluster refused the lease of a new waiter key: expired or revoked")
			return nil, errRestart
		case ctx.Err() != nil:
			// No send was answered within ctx: the cluster is down,
			// cut off or too slow to write.
			d.undoCreate(s, e.key)
			return nil, unreachable(ctx, err)
		case d.ctx.Err() != nil:
			d.undoCreate(s, e.key)
			return nil, errClosed
		case d.sessionDead(s):
			d.undoCreate(s, e.key)
			return nil, errRestart
		case !timedOut && !d.resendable(err):
			d.undoCreate(s, e.key)
			return nil, err
		}
		if err := d.pause(ctx, min(time.Duration(try+1)*20*time.Millisecond, 200*time.Millisecond)); err != nil {
			d.undoCreate(s, e.key)
			if ctx.Err() != nil {
				return nil, unreachable(ctx, err)
			}
			return nil, err
		}
	}
}

// created reads the create transaction's answer.
func (e *entry) created(resp *clientv3.TxnResponse) (*mvccpb.KeyValue, error) {
	own := resp.Responses[0].GetResponseRange()
	firsts := resp.Responses[1].GetResponseRange().GetKvs()
	if resp.Succeeded {
		e.rev = resp.Header.Revision
	} else {
		// An earlier send was applied: adopt its key if it is in our
		// session (it cannot be anyone else's).
		if own == nil || len(own.Kvs) == 0 || own.Kvs[0].Lease != int64(e.s.id) {
			e.d.deleteKey(e.ctx, e.s, e.key, 0)
			return nil, errRestart
		}
		e.rev = own.Kvs[0].CreateRevision
	}
	if len(firsts) == 0 {
		return nil, errRestart // deleted already (lease ended, or an operator)
	}
	return firsts[0], nil
}

// undoSchedule is when undoCreate deletes the key of a create whose outcome
// is unknown: soon, then again after a delayed request could have landed.
var undoSchedule = async.At{0, 100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 5 * time.Second, 15 * time.Second}

// undoCreate deletes key, the waiter key of a create whose outcome is
// unknown, on undoSchedule (a create still in the network may land after a
// delete), until the session ends (which deletes it on the server).
func (d *driver) undoCreate(s *session, key string) {
	d.mu.Lock()
	d.orphans[key] = struct{}{}
	d.mu.Unlock()
	d.spawn(func() {
		defer func() {
			d.mu.Lock()
			delete(d.orphans, key)
			d.mu.Unlock()
		}()
		async.Retry{Schedule: undoSchedule, TryTimeout: createTry, Quit: d.bg.Quit()}.Do(d.ctx, func(ctx context.Context) bool {
			if d.sessionDead(s) {
				return true
			}
			_, _ = d.client.Delete(ctx, key)
			return false
		})
	})
}

// reapOrphan deletes kv now if it is the key of one of this driver's
// creates being undone (a request that landed after its caller gave up),
// compared on its create revision, and reports whether it is gone now (the
// undo may have deleted it first): an acquisition that finds such a key
// ahead of it in the queue need not wait for the undo's schedule.
func (d *driver) reapOrphan(ctx context.Context, kv *mvccpb.KeyValue) bool {
	d.mu.Lock()
	_, ours := d.orphans[string(kv.Key)]
	d.mu.Unlock()
	if !ours {
		return false
	}
	_, err := d.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision)).
		Then(clientv3.OpDelete(string(kv.Key))).Commit()
	return err == nil
}

// deleteKey deletes a waiter key of ours that is known to exist, compared on
// its create revision rev (0: any), now if it can (bounded by ctx, the
// caller's, and createTry), else in the background until that succeeds or
// its session ends.
func (d *driver) deleteKey(ctx context.Context, s *session, key string, rev int64) {
	del := func(ctx context.Context) bool {
		txn := d.client.Txn(ctx)
		if rev != 0 {
			txn = txn.If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev))
		}
		_, err := txn.Then(clientv3.OpDelete(key)).Commit()
		return err == nil
	}
	if ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(ctx, createTry)
		ok := del(ctx)
		cancel()
		if ok {
			return
		}
	}
	d.spawn(func() {
		async.Retry{Schedule: async.Backoff{First: 50 * time.Millisecond, Max: 2 * time.Second}, Within: s.ttl + time.Second, TryTimeout: createTry}.
			Do(d.ctx, func(ctx context.Context) bool { return d.sessionDead(s) || del(ctx) })
	})
}
