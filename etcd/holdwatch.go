package etcd

import (
	"context"
	"math"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// holdWatch is the driver's set of live holds and the one watch that ends
// a hold with ErrLockLost as soon as its key is deleted by another client
// (ForceRelease, by hand): a watch of the deletions under the Locker's
// prefix, demultiplexed to the holds by the attempt id in the key's name
// and the deletion's revision (after the hold's create revision: a
// deletion of an earlier key of the same name is not the hold's). One
// goroutine serves it while the driver has holds: the release of the last
// one ends the stream (before its key's deletion, which the stream need
// not deliver), and the next grant opens one. A held lock costs an entry
// in held, no goroutine and no watch of its own.
//
// Coverage. A hold is covered when the stream is sure to deliver every
// deletion of its key: the stream's start revision from is at most its
// create revision + 1, or a read at a revision ≥ from − 1 found its key with
// its create revision. A hold granted with a key older than that (one
// created while the stream was being set up again) is pending: it is read
// once, and then covered (or ended, its key gone). When a stream ends (the
// member cancelled it or lost its leader, its start revision was compacted,
// the client could not resume it), every held key is read again (a key
// missing, or with another create revision: the hold ends) and the next
// stream starts at the revision after that read: a deletion at or before it
// shows in the read, one after it in the stream.
//
// Its fields are guarded by driver.mu.
type holdWatch struct {
	held    holdSet            // the live holds
	running bool               // a goroutine serves the watch (runHoldWatch)
	from    int64              // the current stream's start revision; noStream while it is being set up
	pending []*hold            // holds granted with a key older than from − 1, not yet read
	wake    chan struct{}      // (1) pending holds to read
	stop    context.CancelFunc // ends the current stream
}

// noStream is holdWatch.from while no stream is set up: every hold granted
// meanwhile is pending.
const noStream = math.MaxInt64

// holdReadBatch is the number of held keys read in one transaction (etcd's
// default --max-txn-ops is 128).
const holdReadBatch = 100

func (w *holdWatch) init() {
	w.wake = make(chan struct{}, 1)
}

func (w *holdWatch) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// watchLocked adds h to the live holds, pending if the current stream
// does not cover it, and reports whether the caller must start the watch
// (startHoldWatch) once the mutex is released.
func (d *driver) watchLocked(h *hold) (start bool) {
	w := &d.hw
	w.held.add(h)
	switch {
	case d.cfg.noHoldWatch:
	case !w.running:
		w.running, w.from = true, noStream
		return true
	case h.token < w.from-1:
		w.pending = append(w.pending, h)
		w.signal()
	}
	return false
}

// unwatchLocked removes h from the live holds.
func (d *driver) unwatchLocked(h *hold) {
	w := &d.hw
	if w.held.remove(h) && w.held.len() == 0 && w.stop != nil {
		w.stop() // nothing to watch: the goroutine leaves
		w.stop = nil
	}
}

// startHoldWatch runs the watch's goroutine, which watchLocked marked
// running.
func (d *driver) startHoldWatch() {
	if !d.spawn(d.runHoldWatch) {
		d.mu.Lock()
		d.hw.running = false
		d.mu.Unlock()
	}
}

// runHoldWatch serves the hold watch until the driver closes or has no
// hold left. Each of its exits clears running in the same critical section
// in which it decides to exit, so a grant after it starts another.
func (d *driver) runHoldWatch() {
	from, ok := d.firstFrom()
	for ok && d.streamHolds(from) {
		from, ok = d.rereadHolds()
	}
}

// exitLocked ends the goroutine's tenure of the watch.
func (w *holdWatch) exitLocked() {
	w.running, w.pending, w.stop = false, nil, nil
}

// firstFrom is the first stream's start revision: the revision after the
// oldest held key's create revision, which covers every hold there is.
func (d *driver) firstFrom() (int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := &d.hw
	if w.held.len() == 0 || d.ctx.Err() != nil {
		w.exitLocked()
		return 0, false
	}
	oldest := int64(math.MaxInt64)
	for h := range w.held.all() {
		oldest = min(oldest, h.token)
	}
	w.from, w.pending = oldest+1, nil
	return w.from, true
}

// streamHolds watches the deletions under the prefix from revision from
// and ends the holds whose keys they delete, reads pending holds, and
// reports whether the stream ended and must be set up again (true) or the
// watch is over (false: the driver closed, or it has no hold left: the
// release of the last one ended the stream).
func (d *driver) streamHolds(from int64) bool {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(d.ctx))
	defer cancel()
	d.mu.Lock()
	if d.hw.held.len() == 0 {
		d.hw.exitLocked()
		d.mu.Unlock()
		return false
	}
	d.hw.stop = cancel
	d.mu.Unlock()
	if hk := d.cfg.hooks; hk != nil && hk.holdOpen != nil {
		hk.holdOpen(from)
	}
	d.stats.holdWatch.Add(1)
	wch := d.client.Watch(ctx, d.cfg.prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithFilterPut())
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	backoff := 50 * time.Millisecond
	for {
		select {
		case wr, ok := <-wch:
			if d.ctx.Err() != nil {
				return d.holdWatchClosed()
			}
			if !ok || wr.Canceled || wr.Err() != nil {
				if wr.CompactRevision != 0 {
					d.stats.holdCompacted.Add(1)
				}
				if hk := d.cfg.hooks; hk != nil && hk.holdEnded != nil {
					hk.holdEnded()
				}
				d.mu.Lock()
				defer d.mu.Unlock()
				if d.hw.held.len() == 0 {
					d.hw.exitLocked()
					return false
				}
				return true
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					d.keyDeleted(ev.Kv.Key, ev.Kv.ModRevision)
				}
			}
		case <-d.hw.wake:
			if d.readPending() {
				backoff = 50 * time.Millisecond
			} else {
				retry.Reset(backoff)
				backoff = min(2*backoff, time.Second)
			}
		case <-retry.C:
			d.hw.signal()
		case <-d.ctx.Done():
			return d.holdWatchClosed()
		}
	}
}

// holdWatchClosed ends the watch when the driver closes.
func (d *driver) holdWatchClosed() bool {
	d.mu.Lock()
	d.hw.exitLocked()
	d.mu.Unlock()
	return false
}

// keyDeleted ends the hold whose key the deletion at rev removed, if it is
// a live hold's and rev is after its create revision.
func (d *driver) keyDeleted(key []byte, rev int64) {
	id, ok := parseWaiterID(key)
	if !ok {
		return
	}
	d.mu.Lock()
	h := d.hw.held.get(id)
	d.mu.Unlock()
	if h == nil || rev <= h.token || string(key) != d.keyOf(h) {
		return
	}
	d.keyGone(h)
}

// keyGone ends h with ErrLockLost if it is still live: its key was
// deleted. Its Lost callbacks run on a goroutine of their own, so that a
// slow one does not hold up the watch.
func (d *driver) keyGone(h *hold) {
	d.mu.Lock()
	live := d.hw.held.has(h)
	d.mu.Unlock()
	if live {
		d.spawn(func() { d.table.Gone(h, errKeyGone, nil) })
	}
}

// readPending reads the pending holds' keys (the current stream covers
// them from then on); false if the read failed and they are pending still.
func (d *driver) readPending() bool {
	d.mu.Lock()
	hs := d.hw.pending
	d.hw.pending = nil
	d.mu.Unlock()
	if len(hs) == 0 {
		return true
	}
	if _, err := d.readHolds(hs); err != nil {
		d.mu.Lock()
		d.hw.pending = append(d.hw.pending, hs...)
		d.mu.Unlock()
		return false
	}
	return true
}

// rereadHolds sets the watch up again after its stream ended: it reads
// every held key (ending the holds whose keys are gone or were created
// again), retrying until that succeeds, and returns the revision after the
// read, from which the next stream starts; false if the driver closed or
// has no hold left.
func (d *driver) rereadHolds() (int64, bool) {
	w := &d.hw
	backoff := 50 * time.Millisecond
	for {
		d.mu.Lock()
		if w.held.len() == 0 || d.ctx.Err() != nil {
			w.exitLocked()
			d.mu.Unlock()
			return 0, false
		}
		w.from, w.pending = noStream, nil
		hs := make([]*hold, 0, w.held.len())
		for h := range w.held.all() {
			hs = append(hs, h)
		}
		d.mu.Unlock()
		if hk := d.cfg.hooks; hk != nil && hk.holdRestart != nil {
			hk.holdRestart()
		}
		rev, err := d.readHolds(hs)
		if err == nil {
			d.mu.Lock()
			w.from = rev + 1
			// Holds granted during the read are pending; those whose
			// key is at least as recent as the read are covered.
			keep := w.pending[:0]
			for _, h := range w.pending {
				if h.token < rev && w.held.has(h) {
					keep = append(keep, h)
				}
			}
			clear(w.pending[len(keep):])
			w.pending = keep
			if len(keep) > 0 {
				w.signal()
			}
			d.mu.Unlock()
			return rev + 1, true
		}
		_ = d.pause(d.ctx, backoff) // the loop's check says if the driver closed
		backoff = min(2*backoff, time.Second)
	}
}

// readHolds reads the keys of hs in linearizable transactions of
// holdReadBatch reads, ends the holds whose key is missing or has another
// create revision, and returns the lowest revision of the reads.
func (d *driver) readHolds(hs []*hold) (int64, error) {
	rev := int64(math.MaxInt64)
	for batch := range slices.Chunk(hs, holdReadBatch) {
		ops := make([]clientv3.Op, len(batch))
		for i, h := range batch {
			ops[i] = clientv3.OpGet(d.keyOf(h), clientv3.WithKeysOnly())
		}
		ctx, cancel := context.WithTimeout(d.ctx, createTry)
		resp, err := d.client.Txn(ctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return 0, err
		}
		d.stats.holdReads.Add(1)
		rev = min(rev, resp.Header.Revision)
		for i, h := range batch {
			kvs := resp.Responses[i].GetResponseRange().GetKvs()
			if len(kvs) == 0 || kvs[0].CreateRevision != h.token {
				d.keyGone(h)
			}
		}
	}
	return rev, nil
}
