//go:build !linux

package conformance

import "syscall"

// workerProcAttr is nil outside Linux: there is no parent-death signal, so
// a worker outlives a test binary killed before it could stop the worker
// (its locks then end by TTL or session expiry).
func workerProcAttr() *syscall.SysProcAttr { return nil }
