package conformance

import (
	"context"
	"sync"
	"time"
)

// progress follows loop workers started with Progress: it counts the
// critical sections they report as they report them, so that a check
// waits for the workers to make progress instead of for a fixed time.
type progress struct {
	mu      sync.Mutex
	n       int
	changed chan struct{} // closed and replaced at every message
	last    []workerMsg   // each worker's last message other than "cs"
	ended   []chan struct{}
}

// watchProgress reads every message of ws from now on.
func watchProgress(ws []*worker) *progress {
	p := &progress{changed: make(chan struct{}), last: make([]workerMsg, len(ws)), ended: make([]chan struct{}, len(ws))}
	for i, w := range ws {
		p.ended[i] = make(chan struct{})
		go func() {
			defer close(p.ended[i])
			for m := range w.msgs {
				p.mu.Lock()
				if m.Ev == "cs" {
					p.n++
				} else {
					p.last[i] = m
				}
				close(p.changed)
				p.changed = make(chan struct{})
				p.mu.Unlock()
			}
		}()
	}
	return p
}

// count is how many critical sections the workers have reported so far.
func (p *progress) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// waitFor waits until the workers have reported n critical sections in
// all; false if ctx ends or d passes first.
func (p *progress) waitFor(ctx context.Context, n int, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		p.mu.Lock()
		got, changed := p.n, p.changed
		p.mu.Unlock()
		if got >= n {
			return true
		}
		select {
		case <-changed:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// result waits up to d for worker i's output to end, and returns its last
// message other than "cs" ("finished" when it ended its loop normally).
func (p *progress) result(i int, d time.Duration) (workerMsg, bool) {
	select {
	case <-p.ended[i]:
	case <-time.After(d):
		return workerMsg{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last[i], true
}
