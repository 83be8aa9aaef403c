package etcd

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/backend"
)

// Operator calls (backend.Inspector, backend.ForceReleaser), made with the
// driver's client from any Locker: the holder is the waiter key with the
// lowest create revision under the lock's prefix, its value (keys.go) names
// its owner, metadata and published hold count, and its create revision is
// its token.

// maxAdminRounds bounds how often ForceRelease reads the queue again when
// the holder changed between its read and its delete.
const maxAdminRounds = 10

// errAdminRace: the holder kept changing while it was being read.
var errAdminRace = errors.New("etcd: the lock changed hands on every read")

// holder is the lock's state read from the cluster: info for the caller,
// and what ForceRelease needs to delete exactly the key it read.
type holder struct {
	info          backend.LockInfo
	key           string
	create, modRe int64
}

// Inspect implements backend.Inspector. Token is the holder key's create
// revision; Holds the nested hold count the holding Locker last wrote;
// SessionBound with TTL 0; Waiters the other waiter keys.
func (d *driver) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	h, err := d.readHolder(ctx, key)
	return h.info, err
}

// ForceRelease implements backend.ForceReleaser: it deletes the holder's
// key in a transaction compared on its create and mod revisions (a holder
// whose key changed in between, or another holder, is read again), so the
// reported holder is the one evicted. The next waiter holds next; its key
// was created later, so its token is higher. With want named, only want's
// key is deleted; held by another holder or free, the error wraps
// ErrNotHeld.
func (d *driver) ForceRelease(ctx context.Context, key string, want backend.Holder) (backend.LockInfo, error) {
	for range maxAdminRounds {
		h, err := d.readHolder(ctx, key)
		if err != nil {
			return backend.LockInfo{}, err
		}
		if !want.Matches(h.info) {
			return backend.LockInfo{}, want.Refusal()
		}
		if !h.info.Held {
			return h.info, nil
		}
		resp, err := d.client.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.create),
			clientv3.Compare(clientv3.ModRevision(h.key), "=", h.modRe),
		).Then(clientv3.OpDelete(h.key)).Commit()
		if err != nil {
			return backend.LockInfo{}, err
		}
		if resp.Succeeded {
			return h.info, nil
		}
	}
	return backend.LockInfo{}, errAdminRace
}

// readHolder reads key's first waiter key and the number of waiter keys in
// one linearizable transaction; a cluster of which no endpoint accepts
// connections fails it at once (reachable).
func (d *driver) readHolder(ctx context.Context, key string) (holder, error) {
	prefix := d.lockPrefix(key)
	h := holder{info: backend.LockInfo{Key: key}}
	if err := d.reachable(ctx); err != nil {
		return h, err
	}
	resp, err := d.client.Txn(ctx).Then(
		clientv3.OpGet(prefix, clientv3.WithFirstCreate()...),
		clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return h, err
	}
	first := resp.Responses[0].GetResponseRange().GetKvs()
	if len(first) == 0 {
		return h, nil
	}
	kv := first[0]
	v := decodeValue(kv.Value)
	h.key, h.create, h.modRe = string(kv.Key), kv.CreateRevision, kv.ModRevision
	h.info.Held, h.info.Owner, h.info.Metadata, h.info.Holds = true, v.Owner, v.Metadata, v.Holds
	h.info.Token, h.info.SessionBound = uint64(kv.CreateRevision), true
	h.info.Waiters = int(max(resp.Responses[1].GetResponseRange().GetCount()-1, 0))
	return h, nil
}
