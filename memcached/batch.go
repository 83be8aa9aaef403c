package memcached

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock/backend"
)

var _ backend.BatchRefresher = (*driver)(nil)

// statBatchFallbacks counts the batch items refreshed one by one (Refresh's
// own path) because the batch could not settle them, for tests.
var statBatchFallbacks atomic.Int64

// maxBatchValue bounds a value read by the batch's gets: a lock record is a
// few kilobytes at most (maxHolds holds). A larger value is not a lock
// record; the batch leaves its items to Refresh.
const maxBatchValue = 1 << 20

// RefreshBatch implements backend.BatchRefresher. Where the Locker knows
// the server of each key (the URL opener, or WithSelector), a batch costs
// two round trips per server, on one connection and whatever the number of
// locks: one "gets k1 k2 …" naming the batch's keys on that server, then,
// in one write, a "cas" for every key whose item still records the lock's
// owner, tenure and hold, extending it to max(recorded expiry, now + TTL)
// exactly as Refresh does (never shorter); the servers are served in
// parallel. Without a selector the gets is gomemcache's GetMulti (one
// request per server) and each cas is a request of its own.
//
// Each item gets the outcome its Lock.Refresh(ctx, item.TTL) would have:
// nil once the cas is STORED (and the lock's TTL, which bounds the
// background undo of its release, grows as with Refresh); ErrNotHeld when
// the item is gone or records another owner, tenure or hold set, without
// writing anything; ErrInvalidTTL for a TTL Refresh refuses; ErrClosed after
// Close; ctx's error as soon as ctx ends; ErrUnavailable when the server
// cannot be reached or answers an error. Nested holds of one owner on the
// same key are extended together by one cas, so they do not conflict with
// each other. Where the batch cannot settle an item itself — its cas found
// the item changed since the gets (a concurrent nested acquire or release),
// or a reply the pipeline cannot place — that item is refreshed with
// Refresh's own read-modify-write, while ctx lasts. After an I/O error on a
// server's connection (a pooled connection to a restarted server) the
// idle connections are dropped and that server's unsettled items are tried
// once more in one exchange, as Refresh retries once on a fresh connection.
// An item whose Lock is not a lock of this Locker is refreshed with its own
// Refresh.
func (d *driver) RefreshBatch(ctx context.Context, items []backend.RefreshItem) []error {
	errs := make([]error, len(items))
	var b refreshBatch
	b.d = d
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
	res, err := run(d, ctx, func(ctx context.Context) ([]error, error) {
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

// refreshBatch is one RefreshBatch call's work within run.
type refreshBatch struct {
	d     *driver
	items []batchItem
	errs  []error // per item, set within run
}

// desyncError is a reply that the pipeline cannot place: the connection is
// closed (it is not a *errReply) and the unanswered items go to Refresh.
type desyncError struct{ reply string }

func (e *desyncError) Error() string {
	return fmt.Sprintf("unexpected memcached reply %q in a pipelined refresh", e.reply)
}

func (b *refreshBatch) refresh(ctx context.Context) {
	// Group by key, in order of first appearance.
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
	if b.d.raw == nil {
		b.viaClient(ctx, keys)
		return
	}
	type server struct {
		addr net.Addr
		keys []*batchKey
	}
	var servers []*server
	byAddr := map[string]*server{}
	var unpicked []*batchKey
	for _, k := range keys {
		addr, err := b.d.sel.PickServer(k.key)
		if err != nil {
			k.state = keyFallback // Refresh meets the same error
			unpicked = append(unpicked, k)
			continue
		}
		s := byAddr[addr.String()]
		if s == nil {
			s = &server{addr: addr}
			byAddr[addr.String()] = s
			servers = append(servers, s)
		}
		s.keys = append(s.keys, k)
	}
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

// server refreshes the keys that live on addr: one exchange, repeated once
// on fresh connections after an I/O error, then Refresh for whatever it
// could not settle.
func (b *refreshBatch) server(ctx context.Context, addr net.Addr, keys []*batchKey) {
	err := b.exchange(ctx, addr, keys)
	var desync *desyncError
	if err != nil && !errors.As(err, &desync) && ioError(err) && ctx.Err() == nil {
		b.d.flushIdle()
		err = b.exchange(ctx, addr, openKeys(keys))
	}
	if err != nil {
		desynced := errors.As(err, &desync) && ctx.Err() == nil
		cerr := classify(err)
		for _, k := range openKeys(keys) {
			if desynced {
				k.state = keyFallback
				continue
			}
			for _, e := range k.entries {
				b.errs[e] = cerr
			}
			k.state = keyDone
		}
	}
	b.fallback(ctx, keys)
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
			if err := ctx.Err(); err != nil {
				b.errs[e] = err
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
		l := b.items[e].l
		if !valid || rec.owner != l.owner || rec.tenure != l.tenure || !rec.has(l.hold) {
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

// exchange is one attempt on one connection to addr: a gets naming every
// key, then every cas in one write, then their replies in order. It
// settles the keys it can; on an error the keys still open are those whose
// outcome it does not know.
func (b *refreshBatch) exchange(ctx context.Context, addr net.Addr, keys []*batchKey) error {
	if len(keys) == 0 {
		return nil
	}
	byKey := make(map[string]*batchKey, len(keys))
	n := len("gets\r\n")
	for _, k := range keys {
		byKey[k.key] = k
		k.found, k.value = false, nil
		n += 1 + len(k.key)
	}
	return b.d.raw.do(ctx, addr, func(rw *bufio.ReadWriter) error {
		buf := make([]byte, 0, n)
		buf = append(buf, "gets"...)
		for _, k := range keys {
			buf = append(buf, ' ')
			buf = append(buf, k.key...)
		}
		buf = append(buf, "\r\n"...)
		if err := write(rw, buf); err != nil {
			return err
		}
		if err := readGets(rw.Reader, byKey); err != nil {
			return err
		}
		if b.d.batchHook != nil {
			b.d.batchHook(addr)
		}
		now := time.Now().UnixMilli()
		buf = buf[:0]
		var sent []*batchKey
		for _, k := range keys {
			value, exp, ok := b.prepare(k, now)
			if !ok {
				continue
			}
			buf = fmt.Appendf(buf, "cas %s %d %d %d %d\r\n", k.key, k.flags, exp, len(value), k.cas)
			buf = append(buf, value...)
			buf = append(buf, "\r\n"...)
			sent = append(sent, k)
		}
		if len(sent) == 0 {
			return nil
		}
		if err := write(rw, buf); err != nil {
			return err
		}
		for _, k := range sent {
			line, err := readLine(rw.Reader)
			if err != nil {
				return err
			}
			switch string(line) {
			case "STORED":
				b.settle(k, nil)
			case "EXISTS": // changed since the gets: Refresh reads it again
				k.state = keyFallback
			case "NOT_FOUND", "NOT_STORED": // as extendHold
				b.settle(k, errGone)
			default:
				if !bytes.HasPrefix(line, []byte("SERVER_ERROR")) {
					return &desyncError{reply: string(line)}
				}
				// memcached swallows the data after a SERVER_ERROR (out
				// of memory with -M): the pipeline is still in sync.
				b.settle(k, classify(&errReply{line: string(line)}))
			}
		}
		return nil
	})
}

// write sends p in one write (bufio writes a large p straight through).
func write(rw *bufio.ReadWriter, p []byte) error {
	if _, err := rw.Write(p); err != nil {
		return err
	}
	return rw.Flush()
}

// readGets reads a gets reply up to END into the keys of byKey.
func readGets(r *bufio.Reader, byKey map[string]*batchKey) error {
	for {
		line, err := readLine(r)
		if err != nil {
			return err
		}
		if string(line) == "END" {
			return nil
		}
		// VALUE <key> <flags> <bytes> <cas unique>
		f := bytes.Fields(line)
		if len(f) != 5 || string(f[0]) != "VALUE" {
			return &desyncError{reply: string(line)}
		}
		k := byKey[string(f[1])]
		flags, err1 := strconv.ParseUint(string(f[2]), 10, 32)
		size, err2 := strconv.Atoi(string(f[3]))
		cas, err3 := strconv.ParseUint(string(f[4]), 10, 64)
		if k == nil || err1 != nil || err2 != nil || err3 != nil || size < 0 || size > maxBatchValue {
			return &desyncError{reply: string(line)}
		}
		value := make([]byte, size+2)
		if _, err := io.ReadFull(r, value); err != nil {
			return err
		}
		if !bytes.HasSuffix(value, []byte("\r\n")) {
			return &desyncError{reply: "a value without its CRLF"}
		}
		k.found, k.flags, k.cas, k.value = true, uint32(flags), cas, value[:size]
	}
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
		if ioError(err) && ctx.Err() == nil {
			b.d.flushIdle()
		}
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
		if err := ctx.Err(); err != nil {
			b.settle(k, err)
			continue
		}
		err := b.d.c.CompareAndSwap(&memcache.Item{Key: k.key, Flags: k.flags, Value: value, Expiration: exp, CasID: k.cas})
		switch {
		case err == nil:
			b.settle(k, nil)
		case errors.Is(err, memcache.ErrCASConflict), ioError(err):
			k.state = keyFallback // Refresh reads again (on fresh connections)
		case errors.Is(err, memcache.ErrNotStored), errors.Is(err, memcache.ErrCacheMiss):
			b.settle(k, errGone)
		default:
			b.settle(k, classify(err))
		}
	}
	b.fallback(ctx, keys)
}
