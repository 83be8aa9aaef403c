package distlock

import "time"

// ParseURL exposes parseURL to the external tests.
var ParseURL = parseURL

// SetReleaseTimeout sets the bound of distlock's own releases (and of
// Close) for a test, and returns the function that restores it.
func SetReleaseTimeout(d time.Duration) (restore func()) {
	old := releaseBound.Swap(int64(d))
	return func() { releaseBound.Store(old) }
}
