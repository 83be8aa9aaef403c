package queuewait

import "sync"

// Attempts are a driver's attempts under way, each by the name its entry
// is known by before it is created (so that an entry is found as soon as
// the server has it), with its owner. The zero value is ready for use.
type Attempts struct {
	mu sync.Mutex
	m  map[string]attempt
}

type attempt struct {
	owner string
	ended chan struct{}
}

// Start records the attempt on the entry name for owner; end, called once
// when the attempt returns (granted, joined or failed), removes it.
func (a *Attempts) Start(name, owner string) (end func()) {
	ended := make(chan struct{})
	a.mu.Lock()
	if a.m == nil {
		a.m = map[string]attempt{}
	}
	a.m[name] = attempt{owner: owner, ended: ended}
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		delete(a.m, name)
		a.mu.Unlock()
		close(ended)
	}
}

// Of reports whether the entry name is that of an attempt of owner under
// way, and returns the channel closed when it ends.
func (a *Attempts) Of(name, owner string) (ended <-chan struct{}, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.m[name]
	if !ok || at.owner != owner {
		return nil, false
	}
	return at.ended, true
}
