//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/holdtab"
)

// driver implements backend.Driver, backend.Blocker, backend.Inspector,
// backend.ForceReleaser, backend.Permitter and backend.ErrorClassifier
// over one directory. Its mechanisms live in their own files: acquire.go
// (taking a lock file and granting a token), lock.go (a held lock), admin.go
// (Inspect, ForceRelease), semaphore.go (permits), hub.go and watch_*.go
// (wake-ups), flock_*.go (the kernel locks), fsys.go (file helpers). The
// table of local holds and their nesting is internal/holdtab's, shared
// with etcd and zookeeper.
type driver struct {
	dir  string
	cfg  *config
	dw   *dirWatch
	pid  int
	host string

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	table   *holdtab.Table[*hold]
	holds   map[*hold]struct{}
	permits map[*permit]struct{}
	wg      sync.WaitGroup // hold watchers
}

// testHooks let tests interfere at precise points.
type testHooks struct {
	beforeGrant func(key string) // a lock file is locked; its fence step comes next
	beforeSwap  func(key string) // ForceRelease is about to rename the fresh file over the lock file
	beforeSleep func(key string) // an Acquire found the lock file busy and is about to sleep
	noWatch     bool             // start no hold watcher: loss is found only by the holder's own calls
}

func withHooks(h *testHooks) Option { return func(c *config) { c.hooks = h } }

func newDriver(dir string, cfg *config) (*driver, error) {
	abs, err := checkDir(dir, cfg.mkdir)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	d := &driver{dir: abs, cfg: cfg, pid: os.Getpid(), host: host, holds: map[*hold]struct{}{}, permits: map[*permit]struct{}{}}
	d.table = holdtab.New(&d.mu, d.detachLocked)
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.dw = attach(abs)
	return d, nil
}

// checkDir returns dir made absolute after checking that it is a writable
// directory on a filesystem whose locks are safe.
func checkDir(dir string, mkdir bool) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("%w: file: empty directory name", backend.ErrInvalidOption)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("%w: file: directory %q: %w", backend.ErrInvalidOption, dir, err)
	}
	st, err := os.Stat(abs)
	if errors.Is(err, fs.ErrNotExist) && mkdir {
		if err = os.MkdirAll(abs, 0o755); err == nil {
			st, err = os.Stat(abs)
		}
	}
	shown := showPath(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%w: file: lock directory %s does not exist (create it, or add mkdir=true)", backend.ErrUnavailable, shown)
	case errors.Is(err, fs.ErrPermission), isBadPath(err):
		return "", fmt.Errorf("%w: file: lock directory %s: %w", backend.ErrInvalidOption, shown, unwrapPath(err))
	case err != nil:
		return "", fmt.Errorf("%w: file: lock directory %s: %w", backend.ErrUnavailable, shown, unwrapPath(err))
	case !st.IsDir():
		return "", fmt.Errorf("%w: file: %s is not a directory", backend.ErrInvalidOption, shown)
	}
	if err := checkFS(abs); err != nil {
		return "", err
	}
	probe, err := os.CreateTemp(abs, ".distlock-probe-*")
	if err != nil {
		return "", fmt.Errorf("%w: file: lock directory %s is not writable: %w", backend.ErrInvalidOption, shown, unwrapPath(err))
	}
	_ = probe.Close()
	_ = os.Remove(probe.Name())
	return abs, nil
}

// showPath is p for a message: quoted if it has bytes that would break the
// one-line error (a newline, a NUL, other control bytes).
func showPath(p string) string {
	if strings.IndexFunc(p, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return p
	}
	return strconv.Quote(p)
}

// unwrapPath drops an *fs.PathError's path, which the message already has.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Capabilities implements backend.Driver. Notify only where the kernel
// reports releases by other processes (inotify on Linux).
func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, SessionBound: true, Notify: d.dw.notify}
}

// Close ends the driver: every lock it holds is given up (its descriptor
// closed, which frees the kernel lock), its watchers stop, and it leaves
// the directory's wake-up hub.
func (d *driver) Close() error {
	d.shutdown(false)
	return nil
}

// closeGrace bounds Close's wait for fence locks.
const closeGrace = 2 * time.Second

// shutdown ends the driver, with crash as a killed process would: no
// record is rewritten, descriptors are just closed.
func (d *driver) shutdown(crash bool) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	hs := make([]*hold, 0, len(d.holds))
	for h := range d.holds {
		hs = append(hs, h)
	}
	for _, h := range hs {
		d.table.EndLocked(h, nil)
	}
	ps := make([]*permit, 0, len(d.permits))
	for p := range d.permits {
		ps = append(ps, p)
	}
	d.mu.Unlock()
	// Releases wait for a fence lock at most closeGrace: then they drop
	// the kernel lock without rewriting the record (releaseFile).
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	for _, p := range ps {
		if !crash {
			_ = p.Release(ctx)
			continue
		}
		_ = p.f.Close()
		d.dw.wake(p.name)
	}
	for _, h := range hs {
		if !crash {
			_ = d.releaseFile(ctx, h)
			continue
		}
		_ = h.f.Close()
		d.dw.wake(h.name)
	}
	d.cancel()
	d.wg.Wait()
	d.dw.detach()
}

// live returns ErrClosed once Close has begun.
func (d *driver) live() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return backend.ErrClosed
	}
	return nil
}

// ErrorCode implements backend.ErrorClassifier for filesystem errors.
func (d *driver) ErrorCode(err error) backend.Code {
	switch {
	case errors.Is(err, fs.ErrPermission), isReadOnly(err):
		return backend.CodeUnavailable
	case errors.Is(err, os.ErrClosed):
		return backend.CodeClosed
	}
	var pe *fs.PathError
	if errors.As(err, &pe) || isTransientErrno(err) {
		return backend.CodeTransient
	}
	return backend.CodeUnknown
}

// pollMax is the longest a waiter sleeps between attempts when no wake-up
// came: short where the kernel reports nothing, a safety net otherwise.
func (d *driver) pollMax() time.Duration {
	if d.dw.notify {
		return time.Second
	}
	return 25 * time.Millisecond
}
