package queuewait

import "context"

// Queue is one waiter's entry in its key's queue, as its backend sees it.
// L is the backend's lock handle, E the event type of its watches.
type Queue[L, E any] interface {
	// Look reads the queue once: first reports that the entry is at its
	// head; otherwise the entry remembers its predecessor for Watch. An
	// error has ended the attempt (the entry deleted, or no longer there).
	Look(ctx context.Context) (first bool, err error)

	// Watch watches the deletion of the predecessor the last Look found,
	// under ctx (cancelled when Await stops waiting on the watch), and
	// returns its events; gone: nothing to wait for (the predecessor is
	// gone already), look again. An error has ended the attempt.
	Watch(ctx context.Context) (events <-chan E, gone bool, err error)

	// Event reads one event of the watch (ok false: events was closed):
	// gone: look again; otherwise wait on, for the events of the channel
	// it returns (that of a new watch) or, if nil, of the same channel. An
	// error has ended the attempt.
	Event(ctx context.Context, ev E, ok bool) (events <-chan E, gone bool, err error)

	// Grant makes the entry, found first, a hold.
	Grant() (L, error)

	// Joinable reports whether the driver has a live hold on the key for
	// the entry's owner, and returns the hold table's signal for the key:
	// a channel closed when this driver is next granted a hold on it.
	Joinable() (changed <-chan struct{}, same bool)

	// Nest joins the driver's hold of the entry's owner on the key, if it
	// has one (ok).
	Nest(ctx context.Context) (l L, ok bool, err error)

	// Head reports whether the head of the queue, as the entry's create
	// or its last Look found it, is another attempt of this driver for the
	// entry's owner, still under way (created, not yet granted: Attempts),
	// and returns the channel closed when that attempt ends.
	Head() (ended <-chan struct{}, ours bool)

	// Fail deletes the entry (in the background if need be) and returns
	// err.
	Fail(err error) error

	// Ends returns what, besides ctx, ends the wait.
	Ends() Ends
}

// Ends are the ends of a wait other than its ctx, and the errors the
// attempt then fails with.
type Ends struct {
	Closed    <-chan struct{} // closed when the driver closes
	ClosedErr error
	Lost      <-chan struct{} // closed when the entry's session is lost
	LostErr   error
	// CtxErr is the error once ctx has ended.
	CtxErr func(ctx context.Context) error
}

// Await waits until q's entry is first of its queue and returns Grant's
// outcome, or joins its owner's hold, or ends the attempt; see the package
// documentation.
func Await[L, E any](ctx context.Context, q Queue[L, E]) (L, error) {
	ends := q.Ends()
	for {
		// Our owner may have been granted the key before this round
		// took the signal (since the entry was created, or while it
		// looked again): then join now, the signal would not tell.
		changed, l, joined, err := join(ctx, q)
		if joined {
			return l, err
		}
		first, err := q.Look(ctx)
		if err != nil {
			var none L
			return none, err
		}
		if first {
			return q.Grant()
		}
		if l, done, err := watch(ctx, q, ends, changed); done {
			return l, err
		}
	}
}

// watch waits on one watch of the predecessor until it says look again
// (done false) or the wait is over (done true, with Await's outcome).
func watch[L, E any](ctx context.Context, q Queue[L, E], ends Ends, changed <-chan struct{}) (l L, done bool, err error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, gone, err := q.Watch(wctx)
	if err != nil || gone {
		return l, err != nil, err
	}
	for {
		select {
		case ev, ok := <-events:
			next, gone, err := q.Event(wctx, ev, ok)
			if err != nil || gone {
				return l, err != nil, err
			}
			if next != nil {
				events = next
			}
		case <-ctx.Done():
			return l, true, q.Fail(ends.CtxErr(ctx))
		case <-ends.Closed:
			return l, true, q.Fail(ends.ClosedErr)
		case <-ends.Lost:
			return l, true, q.Fail(ends.LostErr)
		case <-changed:
			// This driver got a hold on the key: if it is our owner's,
			// nest in it and leave the queue.
			var joined bool
			if changed, l, joined, err = join(ctx, q); joined {
				return l, true, err
			}
		}
	}
}

// Refuse ends a try (no wait) whose entry is not first: it joins the hold
// of the entry's owner if the driver has one by now (it may have been
// granted after the try's own check), and otherwise deletes the entry and
// returns busy. While the head of the queue is an attempt of the same
// owner on this driver that is not granted yet (Head), no other owner
// holds the key: Refuse waits until that attempt is granted (and joins its
// hold) or ends (and looks again: Grant if first).
func Refuse[L, E any](ctx context.Context, q Queue[L, E], busy error) (L, error) {
	var none L
	ends := q.Ends()
	for {
		changed, l, joined, err := join(ctx, q)
		if joined {
			return l, err
		}
		ended, ours := q.Head()
		if !ours {
			return none, q.Fail(busy)
		}
		select {
		case <-changed:
		case <-ended:
		case <-ctx.Done():
			return none, q.Fail(ends.CtxErr(ctx))
		case <-ends.Closed:
			return none, q.Fail(ends.ClosedErr)
		case <-ends.Lost:
			return none, q.Fail(ends.LostErr)
		}
		if _, l, joined, err := join(ctx, q); joined {
			return l, err
		}
		first, err := q.Look(ctx)
		if err != nil {
			return none, err
		}
		if first {
			return q.Grant()
		}
	}
}

// join nests in the driver's hold of the entry's owner, if it has one
// (joined: with the entry deleted, Nest's outcome), and returns the hold
// table's signal taken before.
func join[L, E any](ctx context.Context, q Queue[L, E]) (changed <-chan struct{}, l L, joined bool, err error) {
	changed, same := q.Joinable()
	if !same {
		return changed, l, false, nil
	}
	nested, ok, err := q.Nest(ctx)
	if !ok && err == nil {
		return changed, l, false, nil
	}
	return changed, nested, true, q.Fail(err)
}
