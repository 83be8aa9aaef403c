package zookeeper

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/backend"
)

// Operator calls (backend.Inspector, backend.ForceReleaser), made on the
// driver's current session from any client: the holder is the first lock
// node under the key's parent, its node data (nodedata.go) names its owner,
// metadata and published hold count, and its czxid is its token.

// maxAdminRounds bounds how often Inspect and ForceRelease read the queue
// again when the holder changed while they read it.
const maxAdminRounds = 10

// errAdminRace: the holder kept changing while it was being read.
var errAdminRace = errors.New("zookeeper: the lock changed hands on every read")

// holder is the lock's state read from the server: info for the caller,
// and what ForceRelease needs to delete exactly the node it read.
type holder struct {
	info    backend.LockInfo
	path    string   // the holder's node
	version int32    // its data version when read
	dups    []string // other nodes of the holder's attempt (protected-create duplicates)
}

// Inspect implements backend.Inspector. Token is the holder node's czxid;
// Holds the nested hold count the holding Locker last wrote into the node;
// SessionBound with TTL 0; Waiters the other lock nodes in the queue.
func (d *driver) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	return d.onHolder(ctx, key, func(*session, holder) (bool, error) { return false, nil })
}

// ForceRelease implements backend.ForceReleaser: it deletes the holder's
// node at the data version it read (a holder whose node changed in
// between, or another holder, is read again), so the reported holder is
// the one evicted. The next node in line holds next; its czxid, hence its
// token, is higher. Nodes of the holder's own attempt left by a
// protected create are deleted too.
//
// With want named, only want's node is deleted (the versioned delete makes
// the comparison and the eviction one step); held by another holder or
// free, the error wraps ErrNotHeld.
func (d *driver) ForceRelease(ctx context.Context, key string, want backend.Holder) (backend.LockInfo, error) {
	return d.onHolder(ctx, key, func(s *session, h holder) (bool, error) {
		if !want.Matches(h.info) {
			return false, want.Refusal()
		}
		if !h.info.Held {
			return false, nil
		}
		if hk := d.cfg.hooks; hk != nil && hk.beforeForceDelete != nil {
			hk.beforeForceDelete(h.path)
		}
		var resent bool
		err := d.retrying(ctx, s, func(c *zk.Conn) error {
			err := c.Delete(h.path, h.version)
			if errors.Is(err, zk.ErrNoNode) && resent {
				return nil // an earlier try, cut off with its connection, deleted it
			}
			resent = true
			return err
		})
		switch {
		case err == nil:
			for _, p := range h.dups {
				d.deleteNode(d.ctx, s, p)
			}
			return false, nil
		case errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrBadVersion):
			return true, nil // released, or its hold count changed: read again
		}
		return false, d.mapErr(s, err)
	})
}

// onHolder reads key's holder on the driver's session and hands it to act,
// reading again while the holder went away between the reads or act asks
// for it (retry), at most maxAdminRounds times. It returns the holder act
// last saw.
func (d *driver) onHolder(ctx context.Context, key string, act func(s *session, h holder) (retry bool, err error)) (backend.LockInfo, error) {
	s, err := d.session(ctx)
	if err != nil {
		return backend.LockInfo{}, err
	}
	defer d.unuse(s)
	for range maxAdminRounds {
		h, again, err := d.readHolder(ctx, s, d.parentPath(key))
		if err != nil {
			return backend.LockInfo{}, err
		}
		if again {
			continue
		}
		retry, err := act(s, h)
		if err != nil {
			return backend.LockInfo{}, err
		}
		if !retry {
			return h.info, nil
		}
	}
	return backend.LockInfo{}, errAdminRace
}

// readHolder reads the queue under parent (after a Sync, so that the
// answer is as recent as the leader's) and its first lock node. again: the
// first node went away between the two reads.
func (d *driver) readHolder(ctx context.Context, s *session, parent string) (h holder, again bool, err error) {
	children, err := d.syncedChildren(ctx, s, parent)
	if err != nil {
		return h, false, err
	}
	ms := order(children)
	if len(ms) == 0 {
		return h, false, nil
	}
	first := ms[0]
	h.path = parent + "/" + first.name
	var (
		data []byte
		stat *zk.Stat
	)
	err = d.retrying(ctx, s, func(c *zk.Conn) error {
		var err error
		data, stat, err = c.Get(h.path)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return h, true, nil
	}
	if err != nil {
		return h, false, d.mapErr(s, err)
	}
	nd := decodeNode(data)
	for _, m := range ms[1:] {
		if m.guid == first.guid {
			h.dups = append(h.dups, parent+"/"+m.name)
		} else {
			h.info.Waiters++
		}
	}
	h.version = stat.Version
	h.info.Held, h.info.Owner, h.info.Metadata, h.info.Holds = true, nd.Owner, nd.Metadata, nd.Holds
	h.info.Token, h.info.SessionBound = uint64(stat.Czxid), true
	return h, false, nil
}
