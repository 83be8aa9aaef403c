package conformance

import "syscall"

// workerProcAttr makes a worker process die with the test binary that
// started it (Linux's parent-death signal), so a killed test run leaves no
// worker holding locks.
func workerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
