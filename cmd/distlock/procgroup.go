//go:build unix

package main

import (
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"unsafe"
)

// signalGroup sends sig to the command's process group: the command and
// every process it started that did not leave the group.
func signalGroup(cmd *exec.Cmd, sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok || cmd.Process == nil {
		return
	}
	if err := syscall.Kill(-cmd.Process.Pid, s); err != nil {
		_ = cmd.Process.Signal(sig) // the group is gone; the child may still be a zombie
	}
}

// groupAlive reports whether any process of the command's group is left.
func groupAlive(cmd *exec.Cmd) bool {
	return cmd.Process != nil && syscall.Kill(-cmd.Process.Pid, 0) == nil
}

// foreground makes the command's process group the terminal's foreground
// group when distlock runs in the foreground of a terminal, so that an
// interactive command can read the terminal and gets ^C itself, as it
// would without distlock. restoreForeground takes the terminal back.
func foreground(cmd *exec.Cmd) {
	fd := int(os.Stdin.Fd())
	pgrp, err := tcgetpgrp(fd)
	if err != nil || pgrp != syscall.Getpgrp() {
		return // not a terminal, or distlock is in the background
	}
	cmd.SysProcAttr.Foreground = true
	cmd.SysProcAttr.Ctty = fd
}

// restoreForeground gives the terminal back to distlock's process group
// if the command had it.
func restoreForeground(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil || !cmd.SysProcAttr.Foreground {
		return
	}
	// A background group that sets the foreground group gets SIGTTOU.
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = tcsetpgrp(cmd.SysProcAttr.Ctty, syscall.Getpgrp())
}

func tcgetpgrp(fd int) (int, error) {
	var pgrp int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(syscall.TIOCGPGRP), uintptr(unsafe.Pointer(&pgrp))); e != 0 {
		return 0, e
	}
	return int(pgrp), nil
}

func tcsetpgrp(fd, pgrp int) error {
	p := int32(pgrp)
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(syscall.TIOCSPGRP), uintptr(unsafe.Pointer(&p))); e != 0 {
		return e
	}
	return nil
}
