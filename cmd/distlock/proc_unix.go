//go:build unix && !linux

package main

import (
	"os/exec"
	"syscall"
)

const parentDeathSignal = `On systems other than Linux
there is no parent-death signal: if distlock itself is killed with SIGKILL,
the command keeps running without the lock (a SIGTERM or SIGINT to distlock
is passed on to the command's process group).`

// setProcAttr starts cmd in a process group of its own, so that distlock
// can signal the command and everything it started at once.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	foreground(cmd)
}
