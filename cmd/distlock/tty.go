//go:build unix

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// stdinIsTerminal reports whether standard input is a terminal (a
// character device such as /dev/null is not).
func stdinIsTerminal() bool {
	_, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), ioctlReadTermios)
	return err == nil
}
