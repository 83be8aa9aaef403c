//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock/backend"
)

// Semaphores (Locker.Semaphore): a semaphore of n permits on key is n
// permit files, "s-<key>.<i>.lock" for i below n, each held with the same
// kernel lock as a lock file, beside a fence file "s-<key>.fence" that
// keeps the last token and the permit count of the holders. A permit is
// taken under the fence lock: the first free permit file is locked, the
// token drawn and the count written in one step, so the count is checked
// against the holders atomically. Permits are session-bound as locks are,
// and never nest; a permit file removed or replaced by hand ends its
// holder's lease, as a lock file does.

// MaxPermits is the largest permit count of a semaphore on this backend:
// each permit is a file, and an acquisition may look at each of them.
const MaxPermits = 4096

var _ backend.Permitter = (*driver)(nil)

// PermitCapabilities implements backend.Permitter.
func (d *driver) PermitCapabilities() (backend.Capabilities, error) {
	return backend.Capabilities{Fencing: true, SessionBound: true, Notify: d.dw.notify}, nil
}

// tryAcquirePermit is TryAcquire of one of req.Permits permits.
func (d *driver) tryAcquirePermit(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if err := d.checkPermits(req.Permits); err != nil {
		return nil, err
	}
	return d.takePermit(ctx, req, req.Permits)
}

// acquirePermit is Acquire of one of req.Permits permits: it waits as for a
// lock, woken when any permit file of the semaphore is released.
func (d *driver) acquirePermit(ctx context.Context, req backend.Request) (backend.Lock, error) {
	permits := req.Permits
	if err := d.checkPermits(permits); err != nil {
		return nil, err
	}
	stem := baseName("s", req.Key)
	w := waiter{d: d}
	defer w.stop()
	for {
		sig := d.dw.signal(stem + ".*")
		l, err := d.takePermit(ctx, req, permits)
		if !errors.Is(err, backend.ErrNotAcquired) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return l, err
		}
		if err := w.sleep(ctx, sig, nil); err != nil {
			return nil, err
		}
	}
}

func (d *driver) checkPermits(permits int) error {
	if err := d.live(); err != nil {
		return err
	}
	if permits > MaxPermits {
		return fmt.Errorf("%w: file: %d permits: this backend keeps a file per permit, at most %d", backend.ErrInvalidOption, permits, MaxPermits)
	}
	return nil
}

// takePermit makes one attempt.
func (d *driver) takePermit(ctx context.Context, req backend.Request, permits int) (backend.Lock, error) {
	stem := baseName("s", req.Key)
	var p *permit
	err := d.underFence(ctx, stem, true, func(ff *os.File) error {
		fc, err := readFence(ff)
		if err != nil {
			return err
		}
		if fc.Last == 0 {
			// New, or emptied by hand: draw above every permit file's
			// record, so no token repeats.
			fc.Last = d.permitTokens(stem)
		}
		if fc.Permits != 0 && fc.Permits != permits {
			held, err := d.anyHeld(stem, fc.Permits)
			if err != nil {
				return err
			}
			if held {
				return &backend.PermitsError{Key: req.Key, Have: fc.Permits, Want: permits}
			}
		}
		for i := range permits {
			f, err := d.tryPermitFile(d.permitPath(stem, i))
			if err != nil {
				return err
			}
			if f == nil {
				continue
			}
			if max(fc.Last, recordToken(f)) == math.MaxUint64 {
				_ = f.Close()
				return fmt.Errorf("file: fence counter of semaphore %q exhausted", req.Key)
			}
			fc.Last = max(fc.Last, recordToken(f)) + 1
			fc.Permits = permits
			p = &permit{d: d, stem: stem, name: filepath.Base(f.Name()), path: f.Name(), f: f, token: fc.Last, ended: make(chan struct{})}
			if err := writeFence(ff, fc); err != nil {
				_ = f.Close()
				p = nil
				return err
			}
			return writeRecord(f, record{Held: true, Token: p.token, Owner: req.Owner, PID: d.pid, Host: d.host, Since: time.Now(), Metadata: req.Metadata, Holds: 1})
		}
		return backend.Busy(0)
	})
	if err != nil {
		if p != nil {
			_ = p.f.Close()
		}
		return nil, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		_ = p.f.Close()
		return nil, backend.ErrClosed
	}
	d.permits[p] = struct{}{}
	watch := d.cfg.hooks == nil || !d.cfg.hooks.noWatch
	if watch {
		d.wg.Add(1)
	}
	d.mu.Unlock()
	if watch {
		go d.watchPermit(p, req.Lost)
	}
	return p, nil
}

var errPermitLost = fmt.Errorf("%w: permit file replaced or removed", backend.ErrLockLost)

// watchPermit ends p's lease (lost) when its permit file is removed or
// replaced, as watchHold does for a lock file: the next acquirer would
// take a new file of that name.
func (d *driver) watchPermit(p *permit, lost func(error)) {
	defer d.wg.Done()
	poll := max(d.pollMax(), 250*time.Millisecond)
	timer := time.NewTimer(poll)
	defer timer.Stop()
	for {
		sig := d.dw.signal(p.name)
		select {
		case <-p.ended:
			return
		case <-d.ctx.Done(): // Close
			return
		default:
		}
		if same, err := sameFile(p.f, p.path); err == nil && !same {
			d.mu.Lock()
			gone := !p.released && !p.lost
			if gone {
				p.lost = true
				delete(d.permits, p)
				close(p.ended)
			}
			d.mu.Unlock()
			if gone {
				_ = p.f.Close()
				if lost != nil {
					lost(errPermitLost)
				}
			}
			return
		}
		timer.Reset(poll)
		select {
		case <-p.ended:
			return
		case <-d.ctx.Done():
			return
		case <-sig:
		case <-timer.C:
		}
	}
}

func (d *driver) permitPath(stem string, i int) string {
	return filepath.Join(d.dir, stem+"."+strconv.Itoa(i)+".lock")
}

// tryPermitFile locks the permit file at path if it is free, and returns
// it open (nil if it is held). It looks before it opens the file for
// writing, so that a busy permit's file is not closed after writing, which
// would wake the semaphore's waiters.
func (d *driver) tryPermitFile(path string) (*os.File, error) {
	if held, err := probePath(path); err != nil || held {
		return nil, err
	}
	f, err := openLock(path)
	if err != nil {
		return nil, err
	}
	ok, err := tryLock(f, true)
	if err != nil || !ok {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// permitTokens is the highest token in the records of stem's permit
// files.
func (d *driver) permitTokens(stem string) uint64 {
	ents, _ := os.ReadDir(d.dir)
	var last uint64
	for _, e := range ents {
		if n := e.Name(); !strings.HasPrefix(n, stem+".") || !strings.HasSuffix(n, ".lock") {
			continue
		}
		if f, err := os.Open(filepath.Join(d.dir, e.Name())); err == nil {
			last = max(last, recordToken(f))
			_ = f.Close()
		}
	}
	return last
}

// anyHeld reports whether a permit file of the first n is held.
func (d *driver) anyHeld(stem string, n int) (bool, error) {
	for i := range n {
		r, err := os.Open(d.permitPath(stem, i))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, err
		}
		held, err := probe(r)
		_ = r.Close()
		if err != nil || held {
			return held, err
		}
	}
	return false, nil
}

// permit is one held permit.
type permit struct {
	d                *driver
	stem, name, path string
	f                *os.File
	token            uint64
	released         bool          // guarded by d.mu
	lost             bool          // its file was removed or replaced; guarded by d.mu
	ended            chan struct{} // closed when released or lost
}

func (p *permit) Token() uint64 { return p.token }

// Refresh checks that the permit file is still the one held.
func (p *permit) Refresh(ctx context.Context, _ time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.d.mu.Lock()
	released := p.released
	p.d.mu.Unlock()
	if released {
		return errReleasedHandle
	}
	same, err := sameFile(p.f, p.path)
	if err != nil {
		return err
	}
	if !same {
		return fmt.Errorf("%w: permit file replaced or removed", backend.ErrNotHeld)
	}
	return nil
}

// Release gives the permit back.
func (p *permit) Release(ctx context.Context) error {
	d := p.d
	d.mu.Lock()
	if p.released {
		d.mu.Unlock()
		return errReleasedHandle
	}
	p.released = true
	if p.lost {
		d.mu.Unlock()
		return fmt.Errorf("%w: permit file replaced or removed", backend.ErrNotHeld)
	}
	delete(d.permits, p)
	close(p.ended)
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, closeGrace)
	defer cancel()
	ours := false
	err := d.underFence(ctx, p.stem, true, func(*os.File) error {
		same, err := sameFile(p.f, p.path)
		if err == nil && same {
			ours = true
			_ = writeRecord(p.f, record{Token: p.token})
		}
		return unlock(p.f)
	})
	if err != nil {
		ours, _ = sameFile(p.f, p.path)
		_ = unlock(p.f)
	}
	_ = p.f.Close()
	d.dw.wake(p.name)
	if !ours {
		return fmt.Errorf("%w: permit file replaced or removed", backend.ErrNotHeld)
	}
	return nil
}
