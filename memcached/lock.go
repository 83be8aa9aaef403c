package memcached

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock/backend"
)

// releaseStats counts the final releases by the path they took (meta
// compare-and-delete or tombstone), per configured ReleaseMode, for tests:
// a test of one mode is not disturbed by another mode's releases running
// alongside.
var releaseStats [ReleaseCAS + 1]struct{ metaDeletes, tombstones atomic.Int64 }

// holdRef names one hold in a lock record: the owner, the tenure nonce
// shared by the owner's nested holds, and the hold's own id.
type holdRef struct {
	owner  string
	tenure string
	hold   string
}

// lock is one hold of a lock.
type lock struct {
	d   *driver
	key string // memcached key
	holdRef
	ttl atomic.Int64 // the longest TTL asked for: bounds the background undo
}

// Token is 0: memcached has no fencing counter that survives eviction and
// restart (CAS values restart at 1).
func (l *lock) Token() uint64 { return 0 }

// TryAcquire is one owner-checked acquisition (acquireOnce), once more on
// fresh connections after an I/O error. A grant that lands after ctx ended
// is undone in the background.
func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if _, err := validity(req.TTL); err != nil {
		return nil, err
	}
	key := ItemKey(d.prefix, req.Key)
	l, err := call(d, ctx, func(ctx context.Context) (*lock, error) {
		if err := d.ensurePinned(ctx, key); err != nil {
			return nil, shape(err)
		}
		l, err := d.acquireOnce(ctx, key, req)
		if d.freshRetry(ctx, err) {
			// The first attempt is undone in the background (acquireOnce
			// saw to it); its unique hold id keeps the two apart.
			l, err = d.acquireOnce(ctx, key, req)
		}
		return l, shape(err)
	}, func(l *lock, _ error) {
		if l != nil { // granted after the caller gave up
			d.undo(l.key, l.holdRef, req.TTL)
		}
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// acquireOnce is one acquisition: add the item; if it exists and the same
// owner holds it, add a hold (nest); otherwise report the holder's
// remaining time. When the outcome of a write is unknown it starts the
// background undo of that write's hold.
func (d *driver) acquireOnce(ctx context.Context, key string, req backend.Request) (*lock, error) {
	h := holdRef{owner: req.Owner, hold: randomID(holdBytes)}
	// Compare-and-swap conflicts here come from the same owner's other
	// holds being added and removed: each one is progress, so the loop
	// goes on (with a growing random pause, past the first few) for up to
	// casWindow instead of a fixed count, whose exhaustion under load
	// reported the owner's own lock as another owner's.
	until := time.Now().Add(casWindow)
	for n := 0; casPace(n, until); n++ {
		now := time.Now().UnixMilli()
		h.tenure = randomID(tenureBytes)
		rec := record{expMs: now + req.TTL.Milliseconds(), tenure: h.tenure, holds: []string{h.hold}, metadata: req.Metadata, owner: h.owner}
		err := d.add(ctx, &memcache.Item{Key: key, Value: rec.encode(), Expiration: ttlSeconds(req.TTL)})
		if err == nil {
			return d.newLock(key, h, req.TTL), nil
		}
		if !errors.Is(err, memcache.ErrNotStored) {
			if ioError(err) {
				d.undo(key, h, req.TTL)
			}
			return nil, err
		}
		l, retry, err := d.nest(ctx, key, h, req.TTL)
		if !retry {
			return l, err
		}
	}
	return nil, fmt.Errorf("%w: %s: compare-and-swap kept conflicting for %v (the owner's holds change too fast)", errContention, key, casWindow)
}

// nest adds hold h.hold to the item key if h.owner holds it, by
// compare-and-swap, and extends its expiry to max(remaining, ttl). retry
// means the item changed or vanished since it was read.
func (d *driver) nest(ctx context.Context, key string, h holdRef, ttl time.Duration) (l *lock, retry bool, err error) {
	it, err := d.get(ctx, key)
	if errors.Is(err, memcache.ErrCacheMiss) {
		return nil, true, nil // freed in between: add again
	}
	if err != nil {
		return nil, false, err
	}
	now := time.Now().UnixMilli()
	cur, ok := decodeRecord(it.Value)
	switch {
	case !ok:
		return nil, false, fmt.Errorf("%w: the item %s holds a value distlock did not write", backend.ErrNotAcquired, key)
	case cur.owner != h.owner:
		return nil, false, backend.Busy(time.Duration(max(cur.expMs-now, 0)) * time.Millisecond)
	case len(cur.holds) >= maxHolds:
		return nil, false, fmt.Errorf("%w: the owner already holds this lock %d times (the limit)", backend.ErrNotAcquired, len(cur.holds))
	}
	cur.holds = append(cur.holds, h.hold)
	cur.expMs = max(cur.expMs, now+ttl.Milliseconds()) // never shorten
	it.Value, it.Expiration = cur.encode(), expSeconds(cur.expMs, now)
	h.tenure = cur.tenure
	err = d.cas(ctx, it)
	switch {
	case err == nil:
		return d.newLock(key, h, ttl), false, nil
	case errors.Is(err, memcache.ErrCASConflict), errors.Is(err, memcache.ErrNotStored), errors.Is(err, memcache.ErrCacheMiss):
		return nil, true, nil
	}
	if ioError(err) {
		d.undo(key, h, ttl)
	}
	return nil, false, err
}

func (d *driver) newLock(key string, h holdRef, ttl time.Duration) *lock {
	l := &lock{d: d, key: key, holdRef: h}
	l.ttl.Store(int64(ttl))
	return l
}

// Release is the owner-checked release (removeHold), once more on fresh
// connections after an I/O error; when its outcome stays unknown, the hold
// is removed in the background.
func (l *lock) Release(ctx context.Context) error {
	d := l.d
	_, err := call(d, ctx, func(ctx context.Context) (struct{}, error) {
		err := d.removeHold(ctx, l.key, l.holdRef)
		if d.freshRetry(ctx, err) {
			// A "not held" now may be the first attempt's success: keep
			// the first error, the outcome is unknown.
			if err2 := d.removeHold(ctx, l.key, l.holdRef); !errors.Is(err2, backend.ErrNotHeld) {
				err = err2
			}
		}
		if err != nil && !errors.Is(err, backend.ErrNotHeld) {
			d.undo(l.key, l.holdRef, time.Duration(l.ttl.Load()))
		}
		return struct{}{}, shape(err)
	}, nil)
	return err
}

// Refresh is the owner-checked refresh (extendHold) within ctx.
func (l *lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if _, err := validity(ttl); err != nil {
		return err
	}
	_, err := call(l.d, ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.refresh(ctx, ttl)
	}, nil)
	return err
}

// refresh is Refresh's work within call: extendHold, once more on fresh
// connections after an I/O error, and the longer TTL recorded on success.
// RefreshBatch falls back to it for the items its pipeline cannot settle.
func (l *lock) refresh(ctx context.Context, ttl time.Duration) error {
	d := l.d
	err := d.extendHold(ctx, l.key, l.holdRef, ttl)
	if d.freshRetry(ctx, err) {
		err = d.extendHold(ctx, l.key, l.holdRef, ttl)
	}
	if err == nil {
		l.extended(ttl)
	}
	return shape(err)
}

// extended records a successful refresh with ttl: the lock's ttl, which
// bounds a background undo of its release, becomes the longest asked for.
func (l *lock) extended(ttl time.Duration) {
	for {
		cur := l.ttl.Load()
		if int64(ttl) <= cur || l.ttl.CompareAndSwap(cur, int64(ttl)) {
			return
		}
	}
}

// rewrite is an owner-checked read-modify-write of the item key: gets,
// check that the record still holds h, then write (a compare-and-swap, or
// the final delete). write's retry means the item changed since the gets:
// read again, paced by casPace for at most casWindow.
func (d *driver) rewrite(ctx context.Context, key string, h holdRef, write func(it *memcache.Item, cur record) (retry bool, err error)) error {
	until := time.Now().Add(casWindow)
	for n := 0; casPace(n, until); n++ {
		it, err := d.get(ctx, key)
		if errors.Is(err, memcache.ErrCacheMiss) {
			return errGone
		}
		if err != nil {
			return err
		}
		cur, ok := decodeRecord(it.Value)
		if !ok || !cur.records(h) {
			return errNotOurs
		}
		if retry, err := write(it, cur); !retry {
			return err
		}
	}
	return errCASConflicts
}

// casOutcome is the outcome of an owner-checked compare-and-swap: retry
// when the item changed since the gets, errGone when it vanished.
func casOutcome(err error) (retry bool, _ error) {
	switch {
	case errors.Is(err, memcache.ErrCASConflict):
		return true, nil
	case errors.Is(err, memcache.ErrNotStored), errors.Is(err, memcache.ErrCacheMiss):
		return false, errGone
	}
	return false, err
}

// extendHold is the owner-checked refresh: it rewrites the item by
// compare-and-swap with an expiry of max(remaining, ttl), only if it still
// records h.
func (d *driver) extendHold(ctx context.Context, key string, h holdRef, ttl time.Duration) error {
	return d.rewrite(ctx, key, h, func(it *memcache.Item, cur record) (bool, error) {
		now := time.Now().UnixMilli()
		cur.expMs = max(cur.expMs, now+ttl.Milliseconds())
		it.Value, it.Expiration = cur.encode(), expSeconds(cur.expMs, now)
		return casOutcome(d.cas(ctx, it))
	})
}

// removeHold is the owner-checked release of one hold: it changes the item
// only if it still records h, and deletes it (deleteItem) when h's hold is
// the last one — unless a minimum hold (the linger mark) still runs: then
// the item stays until that moment.
func (d *driver) removeHold(ctx context.Context, key string, h holdRef) error {
	return d.rewrite(ctx, key, h, func(it *memcache.Item, cur record) (bool, error) {
		now := time.Now().UnixMilli()
		linger := cur.lingerMs()
		cur.holds = cur.without(h.hold)
		exp := expSeconds
		switch {
		case cur.liveHolds() > 0:
		case linger > now:
			cur.expMs, exp = linger, holdSeconds // the minimum hold decides
		default:
			return d.deleteItem(ctx, it)
		}
		it.Value, it.Expiration = cur.encode(), exp(cur.expMs, now)
		return casOutcome(d.cas(ctx, it))
	})
}

// deleteItem deletes it unless it changed since the gets that read it:
// with the meta compare-and-delete where the server speaks it, else by a
// compare-and-swap to an empty value that expired a second ago, which
// memcached treats as gone at once.
func (d *driver) deleteItem(ctx context.Context, it *memcache.Item) (retry bool, err error) {
	if addr, ok := d.metaServer(it.Key); ok {
		res, err := d.metaDelete(ctx, addr, it.Key, it.CasID)
		if err != nil {
			return false, err
		}
		switch res {
		case mdDeleted:
			releaseStats[d.release].metaDeletes.Add(1)
			return false, nil
		case mdExists:
			return true, nil
		case mdNotFound:
			return false, errGone
		}
		d.noMeta.Store(addr.String(), true) // fall back to the tombstone
	}
	it.Value, it.Expiration = nil, -1
	retry, err = casOutcome(d.cas(ctx, it))
	if !retry && err == nil {
		releaseStats[d.release].tombstones.Add(1)
	}
	return retry, err
}

// casPace paces try n of a compare-and-swap loop that conflicts with the
// same owner's other holds (each conflict is another hold's progress; with
// natural batching, every hold of a round reads the same CAS value and only
// one of them wins): the first casRetries tries at once, then with a
// growing random pause until the loop has run for casWindow (false).
func casPace(n int, until time.Time) bool {
	if n < casRetries {
		return true
	}
	if time.Now().After(until) {
		return false
	}
	time.Sleep(time.Duration(rand.Int64N(int64(min(n, 100)) * int64(50*time.Microsecond))))
	return true
}
