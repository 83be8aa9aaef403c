package redlock

import (
	"context"
	"sync"
	"sync/atomic"
)

// releasing records, per lock, the nodes still running this driver's
// releases and failed attempts that were decided before every node
// answered (a failed attempt's node counts as answered once a late grant
// there is given back). An acquire of the same lock by this driver waits
// there for those answers before it sends its own request, so that it
// never finds its own previous hold. A later operation's tracking does
// not drop an earlier one's nodes still running: the latest is kept with
// the earlier ones not done yet (its own nodes may stop waiting for
// theirs at its deadline).
type releasing struct {
	n  atomic.Int32 // entries in m: the lookup skips the mutex when 0
	mu sync.Mutex
	m  map[string]*pendingNodes // by lock name: the latest; see pendingNodes.prev
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
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*pendingNodes{}
	}
	old, ok := r.m[key]
	if !ok {
		r.n.Add(1)
	} else {
		// The earlier operations not done yet, in one flat list. The
		// replaced entry's list is dropped, never changed: a waitList
		// taken before still reads it.
		for _, q := range old.prev {
			if !q.finished.Load() {
				p.prev = append(p.prev, q)
			}
		}
		if !old.finished.Load() {
			p.prev = append(p.prev, old)
		}
		old.prev = nil
	}
	r.m[key] = p
}

// of returns the latest operation still running on some nodes of the lock
// named key, or nil.
func (r *releasing) of(key string) *pendingNodes {
	if r.n.Load() == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[key]
}

// after returns the operations on the lock named key whose nodes an
// acquire waits for: the latest and the earlier ones not done when it
// was tracked (an empty list if none).
func (r *releasing) after(key string) waitList {
	if r.n.Load() == 0 {
		return waitList{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.m[key]
	if p == nil {
		return waitList{}
	}
	return waitList{latest: p, prev: p.prev}
}

// forget removes the entry of the lock named key once it and every earlier
// operation it keeps are done; called by a tracked p whose nodes have all
// answered, with p.mu held.
func (r *releasing) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.m[key]
	if e == nil || !e.finished.Load() {
		return
	}
	for _, q := range e.prev {
		if !q.finished.Load() {
			return
		}
	}
	delete(r.m, key)
	r.n.Add(-1)
}

// waitList is the operations an acquire waits for on each node: the
// latest tracked (nil if none) and the earlier ones it keeps.
type waitList struct {
	latest *pendingNodes
	prev   []*pendingNodes
}

// wait waits until node i has answered each operation of w, or ctx ends.
func (w waitList) wait(ctx context.Context, i int) {
	if w.latest == nil {
		return
	}
	if !waitNode(ctx, w.latest, i) {
		return
	}
	for _, p := range w.prev {
		if !waitNode(ctx, p, i) {
			return
		}
	}
}

// waitNode waits until node i has answered p, or ctx ends (false).
func waitNode(ctx context.Context, p *pendingNodes, i int) bool {
	ch := p.wait(i)
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}
