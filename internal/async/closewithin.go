package async

import "time"

// CloseWithin is Close bounded by t: it stops new work and closes Quit at
// once, as Close does, but waits at most t for the work already running to
// end. Work still running then is left to end on its own (the caller
// cancels the contexts it runs under).
func (g *Group) CloseWithin(t time.Duration) {
	done := make(chan struct{})
	go func() { g.Close(); close(done) }()
	timer := time.NewTimer(t)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
}
