package file

import (
	"errors"
	"fmt"

	"github.com/distlock/distlock/backend"
)

// UnsupportedError is the error of New and Open on an operating system
// this backend does not run on. It wraps errors.ErrUnsupported and
// backend.ErrInvalidOption.
type UnsupportedError struct{ GOOS string }

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%v: file:// is unsupported on %s (it needs flock or OFD locks: linux, darwin, the BSDs)", backend.ErrInvalidOption, e.GOOS)
}

// Unwrap returns errors.ErrUnsupported and backend.ErrInvalidOption.
func (e *UnsupportedError) Unwrap() []error {
	return []error{errors.ErrUnsupported, backend.ErrInvalidOption}
}

// UnsafeFSError is the error of New and Open on a directory whose
// filesystem does not give file locks that exclude every process that can
// open the files (NFS, SMB/CIFS, FUSE network filesystems such as sshfs):
// two hosts could each hold the same lock. It wraps
// backend.ErrInvalidOption.
type UnsafeFSError struct {
	Dir string
	FS  string // the filesystem's name or magic number
}

func (e *UnsafeFSError) Error() string {
	return fmt.Sprintf("%v: file:// directory %s is on %s, a network filesystem whose locks do not exclude other hosts; use a local directory", backend.ErrInvalidOption, e.Dir, e.FS)
}

// Unwrap returns backend.ErrInvalidOption.
func (e *UnsafeFSError) Unwrap() error { return backend.ErrInvalidOption }
