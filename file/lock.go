//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package file

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/holdtab"
)

// hold is one tenure: the kernel lock on an open lock file, shared by the
// nested acquisitions of its owner on this driver.
type hold struct {
	holdtab.Hold
	stem, name, path string
	f                *os.File // holds the kernel lock; closed when the tenure ends
	token            uint64
	since            time.Time
	ended            chan struct{} // closed by detachLocked
	detached         bool          // guarded by driver.mu
}

// detachLocked is the table's hook when h ends or its last hold is
// released: h leaves the driver and its watcher stops.
func (d *driver) detachLocked(h *hold) {
	if h.detached {
		return
	}
	h.detached = true
	delete(d.holds, h)
	close(h.ended)
}

// watchHold ends h when its lock file is replaced or removed (a forced
// release, an operator's rm): woken by the directory's events, and
// checking at least once per pollMax without them.
func (d *driver) watchHold(h *hold) {
	defer d.wg.Done()
	poll := max(d.pollMax(), 250*time.Millisecond)
	timer := time.NewTimer(poll)
	defer timer.Stop()
	for {
		sig := d.dw.signal(h.name)
		select {
		case <-h.ended:
			return
		default:
		}
		if same, err := sameFile(h.f, h.path); err == nil && !same {
			d.table.Gone(h, errReplaced, nil)
			_ = h.f.Close()
			return
		}
		timer.Reset(poll)
		select {
		case <-h.ended:
			return
		case <-sig:
		case <-timer.C:
		}
	}
}

// lock is one acquisition's handle on a hold.
type lock struct {
	holdtab.Handle
	d *driver
	h *hold
}

// Token is the hold's fencing token, drawn from the key's fence file when
// the tenure began.
func (l *lock) Token() uint64 { return l.h.token }

var errReleasedHandle = fmt.Errorf("%w: already released", backend.ErrNotHeld)

func errLost() error {
	return fmt.Errorf("%w: lock file replaced or removed (a forced release)", backend.ErrNotHeld)
}

// Refresh checks that the hold's file is still the lock file: the kernel
// keeps the lock as long as the descriptor is open; ttl is ignored.
func (l *lock) Refresh(ctx context.Context, _ time.Duration) error {
	d, h := l.d, l.h
	if err := ctx.Err(); err != nil {
		return err
	}
	if !d.table.Holding(h, &l.Handle) {
		return errLost()
	}
	same, err := sameFile(h.f, h.path)
	if err != nil {
		return err
	}
	if !same {
		d.table.Gone(h, errReplaced, &l.Handle)
		_ = h.f.Close()
		return errLost()
	}
	return nil
}

// Release gives up one hold; the last one marks the record released and
// drops the kernel lock, unless the file was replaced meanwhile
// (ErrNotHeld: the lock of the new file is someone else's).
func (l *lock) Release(ctx context.Context) error {
	d, h := l.d, l.h
	d.mu.Lock()
	r := d.table.ReleaseLocked(h, &l.Handle)
	d.mu.Unlock()
	switch r {
	case holdtab.Again:
		return errReleasedHandle
	case holdtab.WasLost:
		_ = h.f.Close()
		return errLost()
	case holdtab.Kept:
		held, err := d.publish(ctx, h)
		if err != nil {
			return err
		}
		if !held {
			d.table.Gone(h, errReplaced, nil)
			_ = h.f.Close()
			return errLost()
		}
		return nil
	}
	return d.releaseFile(ctx, h)
}

// releaseFile ends h's tenure: under the fence lock (so that a forced
// release sees it before or after, not during) it rewrites the record as
// released if h's file is still the lock file, drops the kernel lock and
// closes the descriptor. If ctx ends, or closeGrace passes, before the
// fence lock is had, the lock is dropped all the same without rewriting
// the record: it must not outlive Release.
func (d *driver) releaseFile(ctx context.Context, h *hold) error {
	ctx, cancel := context.WithTimeout(ctx, closeGrace) // a process stopped holding the fence lock must not hold up a release
	defer cancel()
	ours := false
	err := d.underFence(ctx, h.stem, true, func(*os.File) error {
		same, err := sameFile(h.f, h.path)
		if err == nil && same {
			ours = true
			_ = writeRecord(h.f, record{Token: h.token})
		}
		return unlock(h.f)
	})
	if err != nil {
		ours, _ = sameFile(h.f, h.path)
		_ = unlock(h.f)
	}
	_ = h.f.Close()
	d.dw.wake(h.name)
	if !ours {
		return errLost()
	}
	return nil
}
