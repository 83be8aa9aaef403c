package file

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync writes f's data to stable storage: on macOS fsync(2) leaves it
// in the drive's cache, F_FULLFSYNC flushes that too.
func datasync(f *os.File) error {
	err := control(f, func(fd uintptr) error {
		_, err := unix.FcntlInt(fd, unix.F_FULLFSYNC, 0)
		return err
	})
	if err != nil {
		return f.Sync()
	}
	return nil
}
