package distlock

import "time"

// SetReleaseTimeout sets the bound of distlock's own releases (and of
// Close) for a test, and returns the function that restores it.
func SetReleaseTimeout(d time.Duration) (restore func()) {
	old := releaseBound.Swap(int64(d))
	return func() { releaseBound.Store(old) }
}
