//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package fence

import (
	"context"
	"errors"
	"os"
)

var errNoFlock = errors.New("fence: Dir needs flock(2), which this platform lacks")

func lockFile(context.Context, *os.File) error { return errNoFlock }

func unlockFile(*os.File) error { return errNoFlock }
