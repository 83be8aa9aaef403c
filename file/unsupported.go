//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package file

import (
	"context"
	"runtime"

	"github.com/distlock/distlock/backend"
)

// driver is a stand-in on operating systems without flock or OFD locks:
// newDriver refuses them, so no value of it is ever made.
type driver struct{ dir string }

func newDriver(string, *config) (*driver, error) {
	return nil, &UnsupportedError{GOOS: runtime.GOOS}
}

func (d *driver) TryAcquire(context.Context, backend.Request) (backend.Lock, error) {
	return nil, &UnsupportedError{GOOS: runtime.GOOS}
}
func (d *driver) Capabilities() backend.Capabilities { return backend.Capabilities{} }
func (d *driver) Close() error                       { return nil }
func (d *driver) holder(context.Context, string) (HolderInfo, error) {
	return HolderInfo{}, &UnsupportedError{GOOS: runtime.GOOS}
}

type testHooks struct{}
