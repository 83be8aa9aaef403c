package memcached

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
)

var _ backend.BatchRefresher = (*driver)(nil)

// statBatchFallbacks counts the batch items refreshed one by one (Refresh's
// own path) because the batch could not settle them, for tests.
var statBatchFallbacks atomic.Int64

// RefreshBatch implements backend.BatchRefresher. Each item gets the outcome
// its Lock.Refresh(ctx, item.TTL) would have. With a selector a batch costs
// two round trips per server (one gets, then every cas in one write); an
// item the batch cannot settle is refreshed with Refresh itself.
func (d *driver) RefreshBatch(ctx context.Context, items []backend.RefreshItem) []error {
	errs := make([]error, len(items))
	b := refreshBatch{d: d}
	for i, it := range items {
		l, ok := it.Lock.(*lock)
		switch {
		case it.Lock == nil || (ok && l == nil):
			errs[i] = fmt.Errorf("memcached: RefreshBatch item %d has no lock", i)
		case !ok || l.d != d:
			errs[i] = it.Lock.Refresh(ctx, it.TTL)
		default:
			if _, err := validity(it.TTL); err != nil {
				errs[i] = err
				continue
			}
			b.items = append(b.items, batchItem{i: i, l: l, ttl: it.TTL})
		}
	}
	if len(b.items) == 0 {
		return errs
	}
	res, err := call(d, ctx, func(ctx context.Context) ([]error, error) {
		b.errs = make([]error, len(b.items))
		b.refresh(ctx)
		return b.errs, nil
	}, nil)
	for j, it := range b.items {
		if err != nil {
			errs[it.i] = err
		} else {
			errs[it.i] = res[j]
		}
	}
	return errs
}

// batchItem is one lock of a batch.
type batchItem struct {
	i   int // index in RefreshBatch's items
	l   *lock
	ttl time.Duration
}

// batchKey is one memcached key of a batch and the batch items (nested
// holds, or stale locks of earlier tenures) that refresh it.
type batchKey struct {
	key     string
	entries []int // indices in refreshBatch.items still without an outcome
	state   keyState

	// The item as the last gets read it.
	found bool
	flags uint32
	cas   uint64
	value []byte
}

type keyState uint8

const (
	keyOpen     keyState = iota // entries wait for an outcome
	keyDone                     // every entry has its outcome
	keyFallback                 // entries go to Refresh's own path
)

// refreshBatch is one RefreshBatch call's work within call.
type refreshBatch struct {
	d     *driver
	items []batchItem
	errs  []error // per item, set within call
}

// serverKeys are the keys of a batch that live on one server.
type serverKeys struct {
	addr net.Addr
	keys []*batchKey
}

func (b *refreshBatch) refresh(ctx context.Context) {
	keys := b.byKey()
	if b.d.raw == nil {
		b.viaClient(ctx, keys)
		return
	}
	servers, unpicked := b.byServer(keys)
	var wg sync.WaitGroup
	for i, s := range servers {
		if i == len(servers)-1 {
			b.server(ctx, s.addr, s.keys)
			break
		}
		wg.Go(func() { b.server(ctx, s.addr, s.keys) })
	}
	wg.Wait()
	b.fallback(ctx, unpicked)
}

// byKey groups the items by key, in order of first appearance.
func (b *refreshBatch) byKey() []*batchKey {
	byKey := make(map[string]*batchKey, len(b.items))
	var keys []*batchKey
	for j, it := range b.items {
		k := byKey[it.l.key]
		if k == nil {
			k = &batchKey{key: it.l.key}
			byKey[it.l.key] = k
			keys = append(keys, k)
		}
		k.entries = append(k.entries, j)
	}
	return keys
}

// byServer groups keys by server, in order of first appearance. The keys
// whose server the selector cannot pick are marked keyFallback and returned
// apart: Refresh meets the same error.
func (b *refreshBatch) byServer(keys []*batchKey) (servers []*serverKeys, unpicked []*batchKey) {
	byAddr := map[string]*serverKeys{}
	for _, k := range keys {
		addr, err := b.d.sel.PickServer(k.key)
		if err != nil {
			k.state = keyFallback
			unpicked = append(unpicked, k)
			continue
		}
		s := byAddr[addr.String()]
		if s == nil {
			s = &serverKeys{addr: addr}
			byAddr[addr.String()] = s
			servers = append(servers, s)
		}
		s.keys = append(s.keys, k)
	}
	return servers, unpicked
}

// openKeys returns the keys still without an outcome.
func openKeys(keys []*batchKey) []*batchKey {
	var out []*batchKey
	for _, k := range keys {
		if k.state == keyOpen {
			out = append(out, k)
		}
	}
	return out
}

// fallback refreshes the entries of keys marked keyFallback one by one,
// as Refresh does, while ctx lasts.
func (b *refreshBatch) fallback(ctx context.Context, keys []*batchKey) {
	for _, k := range keys {
		if k.state != keyFallback {
			continue
		}
		for _, e := range k.entries {
			if ctx.Err() != nil {
				b.errs[e] = async.CtxError(ctx)
				continue
			}
			statBatchFallbacks.Add(1)
			b.errs[e] = b.items[e].l.refresh(ctx, b.items[e].ttl)
		}
		k.state = keyDone
	}
}

// prepare decides k from the item the gets read (k.found, k.value) at
// nowMs: the entries whose lock the item no longer records get ErrNotHeld
// and leave k.entries; for the others it returns the extended record's
// value and expiry. ok is false when no entry is left.
func (b *refreshBatch) prepare(k *batchKey, nowMs int64) (value []byte, exp int32, ok bool) {
	if !k.found {
		for _, e := range k.entries {
			b.errs[e] = errGone
		}
		k.entries, k.state = nil, keyDone
		return nil, 0, false
	}
	rec, valid := decodeRecord(k.value)
	var ttl time.Duration
	keep := k.entries[:0]
	for _, e := range k.entries {
		if !valid || !rec.records(b.items[e].l.holdRef) {
			b.errs[e] = errNotOurs
			continue
		}
		keep = append(keep, e)
		ttl = max(ttl, b.items[e].ttl)
	}
	k.entries = keep
	if len(keep) == 0 {
		k.state = keyDone
		return nil, 0, false
	}
	// As extendHold: never shorten. Sequential refreshes of the holds
	// would end at the same expiry.
	rec.expMs = max(rec.expMs, nowMs+ttl.Milliseconds())
	return rec.encode(), expSeconds(rec.expMs, nowMs), true
}

// settle records the outcome of k's cas for all its entries.
func (b *refreshBatch) settle(k *batchKey, err error) {
	for _, e := range k.entries {
		b.errs[e] = err
		if err == nil {
			b.items[e].l.extended(b.items[e].ttl)
		}
	}
	k.state = keyDone
}

// viaClient is the batch without a selector, through gomemcache: one
// GetMulti (a request per server), then a cas per key.
func (b *refreshBatch) viaClient(ctx context.Context, keys []*batchKey) {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.key
	}
	got, err := b.d.c.GetMulti(names)
	if err != nil {
		// Which server failed is unknown: every item goes to Refresh,
		// on fresh connections after an I/O error.
		b.d.freshRetry(ctx, err)
		for _, k := range keys {
			k.state = keyFallback
		}
		b.fallback(ctx, keys)
		return
	}
	for _, k := range keys {
		if it := got[k.key]; it != nil {
			k.found, k.flags, k.cas, k.value = true, it.Flags, it.CasID, it.Value
		}
	}
	if b.d.batchHook != nil {
		b.d.batchHook(nil)
	}
	now := time.Now().UnixMilli()
	for _, k := range keys {
		value, exp, ok := b.prepare(k, now)
		if !ok {
			continue
		}
		if ctx.Err() != nil {
			b.settle(k, async.CtxError(ctx))
			continue
		}
		err := b.d.c.CompareAndSwap(&memcache.Item{Key: k.key, Flags: k.flags, Value: value, Expiration: exp, CasID: k.cas})
		switch {
		case errors.Is(err, memcache.ErrCASConflict), ioError(err):
			k.state = keyFallback // Refresh reads again (on fresh connections)
		default:
			_, err = casOutcome(err)
			b.settle(k, shape(err))
		}
	}
	b.fallback(ctx, keys)
}
