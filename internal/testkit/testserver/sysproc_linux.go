//go:build linux

package testserver

import "syscall"

// sysProcAttr puts the child in its own process group (so the whole group can
// be signalled) and has the kernel SIGKILL it if the parent dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
