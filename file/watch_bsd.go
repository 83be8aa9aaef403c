//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package file

// startWatch has no kernel events to offer here: waiters poll (see
// pollMax), woken at once only by releases in their own process.
func startWatch(string, func(string), func()) (stop func(), ok bool) { return nil, false }
