package redlock

import (
	"sync"
	"sync/atomic"
)

// releasing records, per lock, the nodes still running this driver's
// latest release, or failed attempt, that was decided before every node
// answered (a failed attempt's node counts as answered once a late grant
// there is given back). An acquire of the same lock by this driver waits
// there for that answer before it sends its own request, so that it never
// finds its own previous hold.
type releasing struct {
	n  atomic.Int32 // entries in m: the lookup skips the mutex when 0
	mu sync.Mutex
	m  map[string]*pendingNodes // by lock name
}

// track records p, the nodes of a release (or failed attempt) of the lock
// named key that were still running at its decision. p may be nil or already done.
func (r *releasing) track(key string, p *pendingNodes) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st == nil {
		return // every node has answered meanwhile
	}
	p.tracked, p.key = r, key
	r.mu.Lock()
	if r.m == nil {
		r.m = map[string]*pendingNodes{}
	}
	if _, ok := r.m[key]; !ok {
		r.n.Add(1)
	}
	r.m[key] = p
	r.mu.Unlock()
}

// of returns the nodes still releasing the lock named key (the latest
// release of it), or nil.
func (r *releasing) of(key string) *pendingNodes {
	if r.n.Load() == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[key]
}

// forget removes p, whose nodes have all answered, unless a later release
// of the same lock replaced it. Called with p.mu held.
func (r *releasing) forget(key string, p *pendingNodes) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m[key] == p {
		delete(r.m, key)
		r.n.Add(-1)
	}
}
