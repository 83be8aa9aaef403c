//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package file

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/distlock/distlock/internal/async"
)

// control runs op on f's descriptor; f cannot be closed under it (a
// concurrent Close waits), so the descriptor number is never reused mid-call.
func control(f *os.File, op func(fd uintptr) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) { opErr = op(fd) }); err != nil {
		return err
	}
	return opErr
}

// fileID identifies a file: a lock file replaced by rename is another file
// at the same path.
type fileID struct{ dev, ino uint64 }

func fstatID(f *os.File) (fileID, error) {
	var st unix.Stat_t
	err := control(f, func(fd uintptr) error { return unix.Fstat(int(fd), &st) })
	return fileID{uint64(st.Dev), uint64(st.Ino)}, err
}

// sameFile reports whether path names the file open as f. A path that does
// not exist, or a closed f, is not the same file.
func sameFile(f *os.File, path string) (bool, error) {
	id, err := fstatID(f)
	if errors.Is(err, os.ErrClosed) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if err == unix.ENOENT {
			return false, nil
		}
		return false, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return id == fileID{uint64(st.Dev), uint64(st.Ino)}, nil
}

// openLock opens (creating it if need be) a lock file for locking.
func openLock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
}

// probePath reports whether the file at path is locked, opening it
// read-only (closing it wakes no one); a missing file is not.
func probePath(path string) (bool, error) {
	r, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer r.Close()
	return probe(r)
}

// readAll reads f from offset 0, at most 64 KiB.
func readAll(f *os.File) ([]byte, error) {
	buf := make([]byte, 0, 512)
	for off := int64(0); off < 64<<10; {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.ReadAt(buf[len(buf):cap(buf)], off)
		buf = buf[:len(buf)+n]
		off += int64(n)
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return buf, nil
}

func readRecord(f *os.File) (record, error) {
	b, err := readAll(f)
	if err != nil {
		return record{}, err
	}
	return decodeRecord(b)
}

// recordToken is the token in the record of the lock or permit file f, 0
// if it has none or cannot be read. The fence file is the counter; a
// grant draws above this too, so a fence file emptied or replaced by hand
// never makes a token repeat while the lock file keeps its record.
func recordToken(f *os.File) uint64 {
	rec, err := readRecord(f)
	if err != nil {
		return 0
	}
	return rec.Token
}

// writeRecord replaces f's content with r. Callers hold the fence lock, so
// readers (who take it shared) never see a half-written record.
func writeRecord(f *os.File, r record) error {
	b := r.encode()
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	return f.Truncate(int64(len(b)))
}

func readFence(f *os.File) (fence, error) {
	b, err := readAll(f)
	if err != nil {
		return fence{}, err
	}
	fc, err := decodeFence(b)
	if err != nil {
		return fence{}, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return fc, nil
}

// writeFence writes fc in place and waits until it is on disk: a token is
// handed out only once the counter that follows it is durable.
func writeFence(f *os.File, fc fence) error {
	if _, err := f.WriteAt(fc.encode(), 0); err != nil {
		return err
	}
	return datasync(f)
}

// openFence opens the fence file at path for writing, creating it if need
// be; a new fence file's directory entry is synced, so a counter on disk
// is never lost with its name.
func (d *driver) openFence(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if !errors.Is(err, fs.ErrNotExist) {
		return f, err
	}
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
	if errors.Is(err, fs.ErrExist) {
		return os.OpenFile(path, os.O_RDWR, 0)
	}
	if err != nil {
		return nil, err
	}
	if err := d.syncDir(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

func (d *driver) syncDir() error {
	df, err := os.Open(d.dir)
	if err != nil {
		return err
	}
	defer df.Close()
	return df.Sync()
}

// underFence runs fn holding the fence lock of stem: exclusive for writers
// (grants, releases, nested count updates, forced releases), shared for
// readers, who get a nil file when the fence file does not exist yet.
// Every change of a lock file's record and every swap of a lock file
// happens under it, so a grant's check that its file is current and its
// token draw are one step as far as a forced release can tell.
func (d *driver) underFence(ctx context.Context, stem string, exclusive bool, fn func(ff *os.File) error) error {
	path := filepath.Join(d.dir, stem+".fence")
	var (
		ff  *os.File
		err error
	)
	if exclusive {
		ff, err = d.openFence(path)
	} else {
		ff, err = os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return fn(nil)
		}
	}
	if err != nil {
		return err
	}
	defer ff.Close()
	if err := d.lockWait(ctx, ff, exclusive); err != nil {
		return err
	}
	defer unlock(ff)
	return fn(ff)
}

// lockWait takes f's lock, polling: the fence lock is held only for a
// write and an fsync, and a waiting flock could not be cancelled.
func (d *driver) lockWait(ctx context.Context, f *os.File, exclusive bool) error {
	delay := 20 * time.Microsecond
	var timer *time.Timer
	for {
		ok, err := tryLock(f, exclusive)
		if err != nil || ok {
			return err
		}
		if timer == nil {
			timer = time.NewTimer(delay)
			defer timer.Stop()
		} else {
			timer.Reset(delay)
		}
		select {
		case <-ctx.Done():
			return async.CtxError(ctx)
		case <-timer.C:
		}
		delay = min(2*delay, 5*time.Millisecond)
	}
}

// isBadPath reports a path that can never name a directory: a NUL byte,
// a file as a parent, a symlink loop, a name too long.
func isBadPath(err error) bool {
	for _, e := range []error{unix.EINVAL, unix.ENOTDIR, unix.ELOOP, unix.ENAMETOOLONG} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func isReadOnly(err error) bool { return errors.Is(err, unix.EROFS) }

func isTransientErrno(err error) bool {
	for _, e := range []error{unix.EIO, unix.ENOSPC, unix.EMFILE, unix.ENFILE, unix.EAGAIN, unix.EDQUOT} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
