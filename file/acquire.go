//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package file

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/holdtab"
)

// errAgain: the attempt must start over: the lock file was replaced (a
// forced release) or a hold of the same owner appeared on this driver.
var errAgain = errors.New("file: try again")

// errReplaced is the loss of a hold whose lock file was replaced or
// removed under it.
var errReplaced = fmt.Errorf("%w: lock file replaced or removed (a forced release)", backend.ErrLockLost)

// fenceWaitTry bounds TryAcquire's wait for the fence lock, which a
// grant, a release or a forced release holds for a write and an fsync.
const fenceWaitTry = 2 * time.Second

var errFenceBusy = errors.New("file: the fence lock stayed taken (a process stopped in the middle of a grant?)")

// maxTryRounds bounds TryAcquire's fresh starts while lock files keep
// being replaced under it.
const maxTryRounds = 4

// TryAcquire implements backend.Driver: one attempt at the kernel lock,
// without waiting.
func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if req.Permits > 0 {
		return d.tryAcquirePermit(ctx, req)
	}
	return d.acquire(ctx, req, false)
}

// Acquire implements backend.Blocker: it waits for the kernel lock with
// non-blocking attempts, woken by releases (hub.go) and a bounded poll, so
// that it returns when ctx ends and leaves no thread or descriptor behind.
func (d *driver) Acquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if req.Permits > 0 {
		return d.acquirePermit(ctx, req)
	}
	return d.acquire(ctx, req, true)
}

func (d *driver) acquire(ctx context.Context, req backend.Request, wait bool) (backend.Lock, error) {
	if err := d.live(); err != nil {
		return nil, err
	}
	ks := d.table.Ref(req.Key)
	defer d.table.Unref(req.Key, ks)
	stem := baseName("k", req.Key)
	for round := 0; ; round++ {
		if ctx.Err() != nil {
			return nil, async.CtxError(ctx)
		}
		changed := d.table.Changed(ks)
		if l, ok, err := d.nest(ctx, ks, req); ok || err != nil {
			return l, err
		}
		l, err := d.attempt(ctx, ks, stem, req, wait, changed)
		if !errors.Is(err, errAgain) {
			return l, err
		}
		if !wait && round >= maxTryRounds {
			return nil, backend.Busy(0)
		}
	}
}

// attempt opens the lock file and takes its kernel lock, waiting if wait.
// The descriptor stays open across the tries of one wait, so a waiter
// wakes nobody; it is closed unless the lock is granted.
func (d *driver) attempt(ctx context.Context, ks *holdtab.Key[*hold], stem string, req backend.Request, wait bool, changed <-chan struct{}) (backend.Lock, error) {
	path := filepath.Join(d.dir, stem+".lock")
	if !wait {
		// Look first, read-only: a busy attempt must not close a
		// descriptor opened for writing, which wakes every waiter.
		if held, err := probePath(path); err != nil || held {
			if err == nil {
				err = backend.Busy(0)
			}
			return nil, err
		}
	}
	f, err := openLock(path)
	if err != nil {
		return nil, err
	}
	granted := false
	defer func() {
		if !granted {
			_ = f.Close()
		}
	}()
	w := waiter{d: d}
	defer w.stop()
	var t *turn // this process's turn to wait, once the lock was found busy
	for {
		sig := d.dw.signal(stem + ".lock")
		ok, err := tryLock(f, true)
		if err != nil {
			return nil, err
		}
		if ok {
			gctx, cancel := ctx, context.CancelFunc(func() {})
			if !wait {
				// One attempt: a process stopped in its own grant step
				// (holding the fence lock) must not hold it to ctx's end.
				gctx, cancel = context.WithTimeoutCause(ctx, fenceWaitTry, errFenceBusy)
			}
			l, err := d.grant(gctx, ks, stem, path, f, req)
			cancel()
			if err != nil && !wait && ctx.Err() == nil && errors.Is(err, errFenceBusy) {
				err = &backend.TransientError{Err: errFenceBusy}
			}
			if err != nil {
				_ = unlock(f)
				return nil, err
			}
			granted = true
			return l, nil
		}
		if same, err := sameFile(f, path); err != nil {
			return nil, err
		} else if !same {
			return nil, errAgain // replaced: its holder is evicted, try the new file
		}
		if !wait {
			return nil, backend.Busy(0)
		}
		if t == nil {
			// Busy: queue for this process's turn to wait on the file,
			// then try again at once.
			t = d.dw.enter(stem + ".lock")
			defer d.dw.leave(stem+".lock", t)
			if err := w.take(ctx, t, changed); err != nil {
				return nil, err
			}
			defer func() { <-t.ch }()
			continue
		}
		if hk := d.cfg.hooks; hk != nil && hk.beforeSleep != nil {
			hk.beforeSleep(req.Key)
		}
		// changed: a hold of this driver appeared, maybe ours to join.
		if err := w.sleep(ctx, sig, changed); err != nil {
			return nil, err
		}
	}
}

// grant turns a kernel lock on f into a hold: under the fence lock it
// checks that f is still the file at path (a forced release may have
// renamed a fresh one over it since f was opened), draws the next token
// from the fence file and writes it to disk, and writes the holder's
// record into the lock file.
func (d *driver) grant(ctx context.Context, ks *holdtab.Key[*hold], stem, path string, f *os.File, req backend.Request) (backend.Lock, error) {
	if hk := d.cfg.hooks; hk != nil && hk.beforeGrant != nil {
		hk.beforeGrant(req.Key)
	}
	h := &hold{Hold: holdtab.NewHold(req.Key, req.Owner, req.Metadata), name: stem + ".lock", stem: stem, path: path, f: f, ended: make(chan struct{})}
	err := d.underFence(ctx, stem, true, func(ff *os.File) error {
		if same, err := sameFile(f, path); err != nil || !same {
			if err == nil {
				err = errAgain
			}
			return err
		}
		fc, err := readFence(ff)
		if err != nil {
			return err
		}
		fc.Last = max(fc.Last, recordToken(f))
		if fc.Last == math.MaxUint64 {
			return fmt.Errorf("file: fence counter of %q exhausted", req.Key)
		}
		fc.Last++
		if err := writeFence(ff, fc); err != nil {
			return err
		}
		h.token, h.since = fc.Last, time.Now()
		return writeRecord(f, d.recordOf(h, 1))
	})
	if err != nil {
		return nil, err
	}
	l := &lock{d: d, h: h}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, backend.ErrClosed
	}
	stale := d.table.GrantLocked(ks, h, &l.Handle, req.Lost)
	d.holds[h] = struct{}{}
	watch := d.cfg.hooks == nil || !d.cfg.hooks.noWatch
	if watch {
		d.wg.Add(1)
	}
	d.mu.Unlock()
	if watch {
		go d.watchHold(h)
	}
	if stale != nil {
		// This driver's earlier hold of the key lost its file (we hold
		// the new one): end it, and close its descriptor.
		d.table.Gone(stale, errReplaced, nil)
		_ = stale.f.Close()
	}
	return l, nil
}

// recordOf is h's record with n holds.
func (d *driver) recordOf(h *hold, n int) record {
	return record{Held: true, Token: h.token, Owner: h.Owner, PID: d.pid, Host: d.host, Since: h.since, Metadata: h.Metadata, Holds: n}
}

// nest joins this driver's hold of the same owner on the key, if there is
// one: reentrancy is per Locker. The new count is written into the lock
// file's record (publish), which also checks that the hold's file is still
// the lock file: a hold evicted by a forced release is never joined.
func (d *driver) nest(ctx context.Context, ks *holdtab.Key[*hold], req backend.Request) (backend.Lock, bool, error) {
	l := &lock{d: d}
	h, ok, err := d.table.Nest(ctx, ks, req.Owner, &l.Handle, req.Lost, d.publish, errReplaced)
	l.h = h
	if err != nil {
		// Give back the hold Nest reserved, without waiting: the record's
		// count is corrected by the next update; if it was the last hold
		// (the others were released meanwhile), the lock is dropped even
		// though ctx has ended (releaseFile).
		d.mu.Lock()
		r := d.table.ReleaseLocked(h, &l.Handle)
		d.mu.Unlock()
		if r == holdtab.Last {
			_ = d.releaseFile(ctx, h)
		}
		return nil, false, err
	}
	if !ok {
		if h != nil {
			// The hold was joined, but its file was replaced: Nest
			// ended it; its descriptor is closed here, as when its
			// watcher finds the loss.
			_ = h.f.Close()
		}
		return nil, false, nil
	}
	return l, true, nil
}

// publish writes h's current hold count into its record, and reports
// whether h's file is still the lock file.
func (d *driver) publish(ctx context.Context, h *hold) (bool, error) {
	return d.table.Publish(ctx, h, func() error { return async.CtxError(ctx) }, func(ctx context.Context, n int) (bool, error) {
		held := false
		err := d.underFence(ctx, h.stem, true, func(*os.File) error {
			same, err := sameFile(h.f, h.path)
			if err != nil || !same {
				return err
			}
			held = true
			return writeRecord(h.f, d.recordOf(h, n))
		})
		return held, err
	})
}
