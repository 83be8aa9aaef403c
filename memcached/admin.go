package memcached

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock/backend"
)

// Operator calls (backend.Inspector, backend.ForceReleaser): the lock item
// read from any client, and removed whatever its owner by a compare on its
// CAS value.

// errForeign: the lock's item holds a value that is not a lock record.
var errForeign = errors.New("memcached: the lock's item holds a value distlock did not write")

// itemState is a lock item as read for an operator call.
type itemState struct {
	found bool
	it    *memcache.Item // with its CAS value
	rec   record
	ttl   time.Duration // left before the item expires
}

// info is the LockInfo of the item.
func (s itemState) info() backend.LockInfo {
	if !s.found {
		return backend.LockInfo{Waiters: -1}
	}
	return backend.LockInfo{Held: true, Owner: s.rec.owner, Metadata: s.rec.metadata, Holds: s.rec.liveHolds(),
		TTL: s.ttl, Waiters: -1}
}

// Inspect implements backend.Inspector: owner, metadata and holds from the
// lock record, and the time left before the item expires — the server's
// own count where it speaks the meta protocol, else the expiry its last
// writer recorded. Token is 0 and Waiters -1.
func (d *driver) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	mk := ItemKey(d.prefix, key)
	return call(d, ctx, func(ctx context.Context) (backend.LockInfo, error) {
		if err := d.ensurePinned(ctx, mk); err != nil {
			return backend.LockInfo{}, shape(err)
		}
		st, err := d.readItem(ctx, mk)
		if err != nil {
			return backend.LockInfo{}, shape(err)
		}
		return st.info(), nil
	}, nil)
}

// ForceRelease implements backend.ForceReleaser: it deletes the item only
// if its CAS value is unchanged since it was read, so the holder reported
// is the one removed. With want's owner named, the item is deleted only if
// want holds it; otherwise the error wraps ErrNotHeld.
func (d *driver) ForceRelease(ctx context.Context, key string, want backend.Holder) (backend.LockInfo, error) {
	mk := ItemKey(d.prefix, key)
	return call(d, ctx, func(ctx context.Context) (backend.LockInfo, error) {
		if err := d.ensurePinned(ctx, mk); err != nil {
			return backend.LockInfo{}, shape(err)
		}
		for range casRetries {
			st, err := d.readItem(ctx, mk)
			if err == nil && !want.Matches(st.info()) {
				return backend.LockInfo{}, want.Refusal()
			}
			if err != nil || !st.found {
				return st.info(), shape(err)
			}
			if d.forceHook != nil {
				d.forceHook()
			}
			retry, err := d.deleteItem(ctx, st.it)
			switch {
			case err == nil && !retry:
				return st.info(), nil
			case retry, errors.Is(err, errGone):
				continue // changed or gone since the read: read again
			}
			return backend.LockInfo{}, shape(err)
		}
		return backend.LockInfo{}, errCASConflicts
	}, nil)
}

// readItem reads the lock item mk with its CAS value and remaining TTL:
// with a meta get on the key's server where it can (metaReadable), else
// with gets and the record's own expiry.
func (d *driver) readItem(ctx context.Context, mk string) (itemState, error) {
	if addr, ok := d.metaReadable(mk); ok {
		mi, unsupported, err := d.raw.metaGet(ctx, addr, mk)
		switch {
		case err != nil:
			return itemState{}, err
		case unsupported:
			d.noMeta.Store(addr.String(), true)
		case !mi.found:
			return itemState{}, nil
		default:
			ttl := time.Duration(max(mi.ttl, 0)) * time.Second
			return decodeItem(&memcache.Item{Key: mk, Value: mi.data, CasID: mi.cas}, ttl)
		}
	}
	it, err := d.c.Get(mk)
	if errors.Is(err, memcache.ErrCacheMiss) {
		return itemState{}, nil
	}
	if err != nil {
		return itemState{}, err
	}
	st, err := decodeItem(it, 0)
	if err != nil {
		return itemState{}, err
	}
	st.ttl = max(time.Duration(st.rec.expMs-time.Now().UnixMilli())*time.Millisecond, 0)
	return st, nil
}

// decodeItem is the state of the lock item it, which expires in ttl.
func decodeItem(it *memcache.Item, ttl time.Duration) (itemState, error) {
	rec, ok := decodeRecord(it.Value)
	if !ok {
		return itemState{}, fmt.Errorf("%w (%s)", errForeign, it.Key)
	}
	return itemState{found: true, it: it, rec: rec, ttl: ttl}, nil
}

// metaReadable returns the server of mk if a meta command can be sent
// there: the server is known and not known to lack the meta protocol.
func (d *driver) metaReadable(mk string) (net.Addr, bool) {
	if d.raw == nil {
		return nil, false
	}
	addr, err := d.sel.PickServer(mk)
	if err != nil {
		return nil, false
	}
	if _, no := d.noMeta.Load(addr.String()); no {
		return nil, false
	}
	return addr, true
}
