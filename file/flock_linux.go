package file

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// On Linux the locks are open file description locks (F_OFD_SETLK): owned
// by the open file description, like flock, so two descriptors opened in
// one process exclude each other and closing another descriptor of the
// file does not drop the lock (classic POSIX fcntl locks do both wrong);
// and, unlike flock, they can be tested without being taken (F_OFD_GETLK),
// so Inspect never makes an acquisition fail.

const lockKind = "OFD lock"

// tryLock takes the whole-file lock of f without waiting: exclusive, or
// shared. It reports false when another open file description holds a
// conflicting lock.
func tryLock(f *os.File, exclusive bool) (bool, error) {
	lk := unix.Flock_t{Type: unix.F_RDLCK}
	if exclusive {
		lk.Type = unix.F_WRLCK
	}
	err := fcntlLock(f, unix.F_OFD_SETLK, &lk)
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
		return false, nil
	}
	return err == nil, err
}

// unlock drops f's lock.
func unlock(f *os.File) error {
	lk := unix.Flock_t{Type: unix.F_UNLCK}
	return fcntlLock(f, unix.F_OFD_SETLK, &lk)
}

// probe reports whether any open file description other than f holds a
// lock on f's file, without taking one. f is a descriptor of the caller's
// own that holds no lock.
func probe(f *os.File) (bool, error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	if err := fcntlLock(f, unix.F_OFD_GETLK, &lk); err != nil {
		return false, err
	}
	return lk.Type != unix.F_UNLCK, nil
}

func fcntlLock(f *os.File, cmd int, lk *unix.Flock_t) error {
	return control(f, func(fd uintptr) error {
		for {
			err := unix.FcntlFlock(fd, cmd, lk)
			if err != unix.EINTR {
				return err
			}
		}
	})
}

// datasync writes f's data to disk: fdatasync, which skips the inode's
// times (a fence file is overwritten in place, its size unchanged).
func datasync(f *os.File) error {
	return control(f, func(fd uintptr) error { return unix.Fdatasync(int(fd)) })
}
