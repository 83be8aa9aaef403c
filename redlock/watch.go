package redlock

import (
	"context"
	"sync"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/redissub"
)

// Watch implements backend.Notifier for observers (Election.Observe): every
// node's release message wakes it, and it never stands in the waiters'
// queue. It returns once N − quorum + 1 nodes confirmed their subscription,
// every node answered or timed out, or ctx ended. The acquire loop uses
// WatchHeld.
func (d *driver) Watch(ctx context.Context, req backend.Request) (<-chan struct{}, func()) {
	return d.watch(ctx, req.Key, true)
}

// WatchHeld implements backend.HeldNotifier for distlock's acquire loop:
// the waiter joins the key's waiters' queue on every node, where a release
// wakes only the head; until its cancel, the driver's attempts on the lock
// go to the lock's gate node first (see gate.go). It does not mark the lock (no round trip to the
// nodes): the loop attempts again right after it, and a busy attempt marks
// the holder on every node that answers busy. Its cancel hands a received wake-up on whether or
// not it leaves holding the lock: a lock taken on Redlock's nodes is not
// marked for the waiters behind it, whose hand-on attempt marks it.
func (d *driver) WatchHeld(ctx context.Context, req backend.Request) (<-chan struct{}, func(held bool)) {
	ch, cancel := d.watch(ctx, req.Key, false)
	d.waiting.add(req.Key, req.Owner)
	var once sync.Once
	return ch, func(bool) {
		once.Do(func() { d.waiting.remove(req.Key, req.Owner) })
		cancel()
	}
}

// watch is Watch (all: an observer, woken by every release) and WatchHeld
// (a queued waiter).
func (d *driver) watch(ctx context.Context, key string, all bool) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	if d.closed.Load() {
		return ch, func() {}
	}
	k := d.keys(key)
	channel := k.Channel
	rank := redissub.NextRank()
	w := &watch{}
	need := len(d.nodes) - d.quorum + 1
	answers := make(chan bool, len(d.nodes))
	launched := 0
	for _, nd := range d.nodes {
		if nd.down(d) {
			continue
		}
		if d.g.Go(func() {
			var (
				ok     bool
				cancel func()
			)
			if all {
				ok, cancel = nd.sub.WatchAllRank(ctx, channel, ch)
			} else {
				ok, cancel = nd.sub.WatchRank(ctx, channel, ch, rank)
			}
			if ok && !w.add(cancel) {
				cancel()
			}
			// An observer marks the lock itself; a waiter's next
			// attempt does (WatchHeld).
			answers <- ok && (!all || redislua.Watch(ctx, nd.client, k) == nil)
		}) {
			launched++
		}
	}
	for confirmed := 0; launched > 0 && confirmed < need; launched-- {
		select {
		case ok := <-answers:
			if ok {
				confirmed++
			}
		case <-ctx.Done():
			// The caller calls w.cancel, which also cancels the nodes
			// that confirm after this.
			return ch, w.cancel
		}
	}
	return ch, w.cancel
}

// watch collects the per-node cancels of one waiter.
type watch struct {
	mu        sync.Mutex
	cancelled bool
	cancels   []func()
}

// add records a node's cancel; false if the watch was cancelled already.
func (w *watch) add(cancel func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancelled {
		return false
	}
	w.cancels = append(w.cancels, cancel)
	return true
}

func (w *watch) cancel() {
	w.mu.Lock()
	cs := w.cancels
	w.cancels, w.cancelled = nil, true
	w.mu.Unlock()
	for _, c := range cs {
		c()
	}
}
