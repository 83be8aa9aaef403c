package distlock

import (
	"sync"
	"sync/atomic"
)

// ownerWaiters wakes the waiters of one Locker that wait for a key its
// owner has just been granted: "each acquisition by the holding owner
// succeeds at once" must hold for acquisitions already waiting, and on a
// backend that polls (or notifies only on release) such a waiter would
// otherwise sleep until the next release or retry. A waiter registers only
// once it has to wait, and a grant looks the map up only while someone
// waits, so the uncontended path pays one atomic load.
type ownerWaiters struct {
	n  atomic.Int64 // registered waiters: a grant locks mu only when > 0
	mu sync.Mutex
	m  map[ownerKey]map[chan struct{}]struct{}
}

type ownerKey struct{ key, owner string }

// register returns a channel that receives a wake-up when owner is granted
// key in this Locker, and the function that unregisters it.
func (w *ownerWaiters) register(key, owner string) (<-chan struct{}, func()) {
	k := ownerKey{key, owner}
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	if w.m == nil {
		w.m = map[ownerKey]map[chan struct{}]struct{}{}
	}
	if w.m[k] == nil {
		w.m[k] = map[chan struct{}]struct{}{}
	}
	w.m[k][ch] = struct{}{}
	w.n.Add(1)
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		if _, ok := w.m[k][ch]; ok {
			delete(w.m[k], ch)
			if len(w.m[k]) == 0 {
				delete(w.m, k)
			}
			w.n.Add(-1)
		}
		w.mu.Unlock()
	}
}

// granted wakes every waiter of owner on key.
func (w *ownerWaiters) granted(key, owner string) {
	if w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.m[ownerKey{key, owner}] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
