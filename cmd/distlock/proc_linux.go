package main

import (
	"os/exec"
	"syscall"
)

// parentDeathSignal says, for --help and the README, what happens to the
// command when distlock itself is killed.
const parentDeathSignal = `On Linux the command is also
sent SIGKILL if distlock itself dies (even by SIGKILL), so it never runs on
without the lock; processes it started are not covered by that.`

// setProcAttr starts cmd in a process group of its own, so that distlock
// can signal the command and everything it started at once, and asks the
// kernel to SIGKILL it when distlock dies. The parent-death signal follows
// the OS thread that started the command; the Go runtime keeps its threads
// unless a goroutine exits while locked to one, which distlock never does.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	foreground(cmd)
}
