package distlock

import (
	"context"
	"time"

	"github.com/distlock/distlock/backend"
)

// quickObserve is the first pause of Observe's quick polls while nobody
// leads on a backend that announces releases.
const quickObserve = 10 * time.Millisecond

// leaderWatch is how Observe waits between two looks at the leader. Every
// backend is polled at the observe interval. Where the driver announces
// releases of locks (backend.Notifier whose Watch of a lock returns a
// channel: redis, redlock, PostgreSQL with notify), a release of the key
// also wakes the observer at once, and while nobody leads it looks again
// after 10ms, doubling up to the interval, because a candidate is about to
// take over and acquisitions are not announced. Drivers that wake one
// waiter of a key at a time (redis, redlock) keep their Watch for
// observers like this one out of the waiters' queue: every release wakes
// the observer, and an observer that is slow to look never holds the
// wake-up of a waiter (the waiters watch through backend.HeldNotifier).
// The backends that queue waiters themselves (backend.Blocker: memory,
// ZooKeeper, the SQL backends) are polled; so is a Notifier whose Watch of
// a lock returns a nil channel (memory, whose Watch serves permits only).
type leaderWatch struct {
	l        *Locker // nil: the backend cannot tell releases (polling only)
	key      string
	interval time.Duration
	quick    time.Duration // next quick pause; 0 while someone leads
	ch       <-chan struct{}
	cancel   func()
}

func (e *Election) leaderWatch() *leaderWatch {
	w := &leaderWatch{key: e.key, interval: e.interval}
	if e.locker.notifier != nil {
		w.l = e.locker
	}
	return w
}

// arm registers for the key's next release; called before each look, so
// a release between the look and the wait is not missed.
func (w *leaderWatch) arm(ctx context.Context) {
	if w.l == nil || w.ch != nil || w.l.begin() != nil {
		return
	}
	defer w.l.inflight.Done()
	w.ch, w.cancel = w.l.notifier.Watch(ctx, backend.Request{Key: w.key})
	if w.ch == nil {
		// Releases of this key are not announced: poll. A cancel given
		// with the nil channel ends its registration now.
		if w.cancel != nil {
			w.cancel()
		}
		w.l, w.cancel = nil, nil
	}
}

// wait pauses until the next look, given whether someone leads now; it
// returns ctx's error when ctx ends.
func (w *leaderWatch) wait(ctx context.Context, held bool) error {
	d := w.interval
	if w.l != nil && !held {
		w.quick = min(max(2*w.quick, quickObserve), w.interval)
		d = w.quick
	} else {
		w.quick = 0
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-w.ch: // nil when not armed: never fires
		w.stop()
		w.quick = 0
		return nil
	case <-ctx.Done():
		w.stop()
		return ctx.Err()
	}
}

// stop drops the registration.
func (w *leaderWatch) stop() {
	if w.cancel != nil {
		w.cancel()
	}
	w.ch, w.cancel = nil, nil
}
