//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package fence

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
)

// flockPoll is how often lockFile retries a held lock. Holders keep it for
// a few file operations, so a short poll wastes little.
const flockPoll = 2 * time.Millisecond

// lockFile takes an exclusive flock on f, waiting until ctx ends. A flock
// belongs to the open file description, so two opens of the same file
// exclude each other within one process as across processes.
func lockFile(ctx context.Context, f *os.File) error {
	t := time.NewTicker(flockPoll)
	defer t.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func unlockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
