//go:build !linux

package testserver

import "syscall"

// sysProcAttr puts the child in its own process group. Without Linux's
// Pdeathsig, children outlive a killed test binary: always call Stop.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
