//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package file

import (
	"os"

	"golang.org/x/sys/unix"
)

// On macOS and the BSDs the locks are flock(2) locks: owned by the open
// file description, so two descriptors opened in one process exclude each
// other and closing another descriptor of the file does not drop the lock
// (classic POSIX fcntl locks do both wrong).

const lockKind = "flock"

// tryLock takes the whole-file lock of f without waiting: exclusive, or
// shared. It reports false when another open file description holds a
// conflicting lock.
func tryLock(f *os.File, exclusive bool) (bool, error) {
	how := unix.LOCK_SH | unix.LOCK_NB
	if exclusive {
		how = unix.LOCK_EX | unix.LOCK_NB
	}
	err := flock(f, how)
	if err == unix.EWOULDBLOCK {
		return false, nil
	}
	return err == nil, err
}

// unlock drops f's lock.
func unlock(f *os.File) error { return flock(f, unix.LOCK_UN) }

// probe reports whether another open file description holds an exclusive
// lock on f's file. flock has no test operation: it takes a shared lock on
// f for an instant, so an acquisition at that very instant finds the lock
// busy. f is a descriptor of the caller's own that holds no lock.
func probe(f *os.File) (bool, error) {
	ok, err := tryLock(f, false)
	if err != nil || !ok {
		return !ok, err
	}
	return false, unlock(f)
}

func flock(f *os.File, how int) error {
	return control(f, func(fd uintptr) error {
		for {
			err := unix.Flock(int(fd), how)
			if err != unix.EINTR {
				return err
			}
		}
	})
}
