package holdtab

import (
	"context"
	"sync"
)

// Hold is the backend-independent part of one tenure; a backend's hold
// type embeds it. Key, Owner and Metadata are fixed (Metadata is the first
// acquisition's, kept by nested ones); Count and Lost are guarded by the
// table's mutex.
type Hold struct {
	Key, Owner, Metadata string
	Count                int  // holds granted and not released
	Lost                 bool // the tenure ended (Gone, EndLocked)

	// The live handles and their Lost callbacks: most holds have one
	// handle (first), nested ones the others in more. Guarded as Count.
	first     *Handle
	firstLost func(error)
	more      map[*Handle]func(error)
	pub       chan struct{} // one Publish at a time; made by the first
}

// NewHold returns the hold part of a new tenure, with no handle yet
// (GrantLocked adds the first).
func NewHold(key, owner, metadata string) Hold {
	return Hold{Key: key, Owner: owner, Metadata: metadata}
}

// addHandle records hd and its Lost callback.
func (h *Hold) addHandle(hd *Handle, lost func(error)) {
	if h.first == nil {
		h.first, h.firstLost = hd, lost
		return
	}
	if h.more == nil {
		h.more = map[*Handle]func(error){}
	}
	h.more[hd] = lost
}

// removeHandle forgets hd.
func (h *Hold) removeHandle(hd *Handle) {
	if h.first == hd {
		h.first, h.firstLost = nil, nil
		return
	}
	delete(h.more, hd)
}

// lostCallbacks appends the Lost callbacks of the handles other than
// except (nil: all) to lost.
func (h *Hold) lostCallbacks(lost []func(error), except *Handle) []func(error) {
	if h.first != nil && h.first != except && h.firstLost != nil {
		lost = append(lost, h.firstLost)
	}
	for hd, f := range h.more {
		if hd != except && f != nil {
			lost = append(lost, f)
		}
	}
	return lost
}

// Base returns h; through embedding it makes a backend's hold a Holder.
func (h *Hold) Base() *Hold { return h }

// Holder is a backend's hold type: a pointer to a struct that embeds Hold.
type Holder interface {
	comparable
	Base() *Hold
}

// Handle is one acquisition's share of a hold; a backend's lock handle
// embeds it.
type Handle struct {
	released bool // guarded by the table's mutex
}

// Key is the local state of one lock name: the hold the driver has on it,
// if any, and a channel closed whenever a new hold is granted.
type Key[H Holder] struct {
	refs    int
	hold    H
	changed chan struct{} // made when first asked for (Changed, Joinable)
}

// changedLocked returns k's Changed channel, making it if no one asked yet.
func (k *Key[H]) changedLocked() chan struct{} {
	if k.changed == nil {
		k.changed = make(chan struct{})
	}
	return k.changed
}

// Table is a driver's holds, keyed by lock name.
type Table[H Holder] struct {
	mu     *sync.Mutex
	keys   map[string]*Key[H]
	detach func(H)
}

// New returns an empty table guarded by mu. detach is called, with mu
// held, when a hold ends or its last handle is released, after the hold
// left its key: it undoes the backend's own links to the hold (its
// session's set, a watch).
func New[H Holder](mu *sync.Mutex, detach func(H)) *Table[H] {
	return &Table[H]{mu: mu, keys: map[string]*Key[H]{}, detach: detach}
}

// Ref returns the state of key, kept until Unref or while a hold on it
// lives.
func (t *Table[H]) Ref(key string) *Key[H] {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.keys[key]
	if k == nil {
		k = &Key[H]{}
		t.keys[key] = k
	}
	k.refs++
	return k
}

// Unref ends a Ref.
func (t *Table[H]) Unref(key string, k *Key[H]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k.refs--
	var none H
	if k.refs == 0 && k.hold == none && t.keys[key] == k {
		delete(t.keys, key)
	}
}

// Changed returns the channel that the next GrantLocked on k closes.
func (t *Table[H]) Changed(k *Key[H]) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return k.changedLocked()
}

// Joinable reports whether k has a live hold of owner, and returns the
// channel that the next GrantLocked on k closes.
func (t *Table[H]) Joinable(k *Key[H], owner string) (<-chan struct{}, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var none H
	return k.changedLocked(), k.hold != none && !k.hold.Base().Lost && k.hold.Base().Owner == owner
}

// GrantLocked makes h, with one hold for handle hd (whose Lost callback is
// lost, nil for none), k's hold, wakes the waiters on k's Changed channel,
// and returns the hold it replaced (zero if none), which the caller ends
// with Gone once the mutex is released.
func (t *Table[H]) GrantLocked(k *Key[H], h H, hd *Handle, lost func(error)) (stale H) {
	b := h.Base()
	b.Count = 1
	b.addHandle(hd, lost)
	stale = k.hold
	k.hold = h
	if k.changed != nil {
		close(k.changed)
		k.changed = nil // the next one asked for is made then
	}
	return stale
}

// Nest joins k's hold if it is live and owner's, for handle hd (whose Lost
// callback is lost): it reserves one more hold (so a concurrent last
// release keeps the tenure) and calls publish, which writes the new count
// and reports whether the tenure still exists. If it does not, hd is
// released and the hold ends with gone (Gone), and Nest returns ok false,
// as it does when there is no hold to join. On a publish error it returns
// the hold and the error: hd keeps its reserved hold, which the caller
// gives back (releasing hd, in the background).
func (t *Table[H]) Nest(ctx context.Context, k *Key[H], owner string, hd *Handle, lost func(error), publish func(context.Context, H) (bool, error), gone error) (h H, ok bool, err error) {
	h, ok = t.join(k, owner, hd, lost)
	if !ok {
		return h, false, nil
	}
	held, err := publish(ctx, h)
	if err != nil {
		return h, false, err
	}
	if !held {
		t.drop(h, hd, gone)
		return h, false, nil
	}
	return h, true, nil
}

// join adds a hold for handle hd (Lost callback lost) to k's hold if it is
// live and owner's, and returns it; false if there is none.
func (t *Table[H]) join(k *Key[H], owner string, hd *Handle, lost func(error)) (H, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := k.hold
	var none H
	if h == none || h.Base().Lost || h.Base().Owner != owner {
		return none, false
	}
	h.Base().Count++ // reserve, so a concurrent last release keeps the tenure
	h.Base().addHandle(hd, lost)
	return h, true
}

// drop undoes a join whose publish found the tenure gone: hd is released
// and h ends with cause (Gone).
func (t *Table[H]) drop(h H, hd *Handle, cause error) {
	t.mu.Lock()
	hd.released = true
	h.Base().removeHandle(hd)
	t.mu.Unlock()
	t.Gone(h, cause, nil)
}

// Releasing is what ReleaseLocked did.
type Releasing int

const (
	// Kept: one hold was given up; others remain (publish the count).
	Kept Releasing = iota
	// Last: the last hold was given up and h detached (remove the tenure).
	Last
	// WasLost: h had ended; hd is released.
	WasLost
	// Again: hd had been released already; nothing changed.
	Again
)

// ReleaseLocked releases hd and gives up its hold on h.
func (t *Table[H]) ReleaseLocked(h H, hd *Handle) Releasing {
	if hd.released {
		return Again
	}
	hd.released = true
	b := h.Base()
	b.removeHandle(hd)
	if b.Lost {
		return WasLost
	}
	b.Count--
	if b.Count > 0 {
		return Kept
	}
	t.detachLocked(h)
	return Last
}

// ReleaseKept finishes a release that kept other holds on h
// (ReleaseLocked returned Kept): it writes the new count with publish,
// which reports whether the tenure still exists. The release is reported
// lost (lost true, and h ended with gone, as by Gone) only when the
// tenure is gone while holds on it remain or h has ended. A tenure that
// the owner's own last release, racing this one, removed meanwhile (no
// hold left, h not ended) is no loss: the release succeeded (false, nil).
// An error of publish is returned as it is.
func (t *Table[H]) ReleaseKept(ctx context.Context, h H, publish func(context.Context, H) (bool, error), gone error) (lost bool, err error) {
	held, err := publish(ctx, h)
	if err != nil || held {
		return false, err
	}
	t.mu.Lock()
	last := h.Base().Count == 0 && !h.Base().Lost
	t.mu.Unlock()
	if last {
		return false, nil // the owner's last release removed it meanwhile
	}
	t.Gone(h, gone, nil)
	return true, nil
}

// Holding reports whether hd is not released and h has not ended.
func (t *Table[H]) Holding(h H, hd *Handle) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !hd.released && !h.Base().Lost
}

// detachLocked removes h from its key's state and runs the detach hook.
func (t *Table[H]) detachLocked(h H) {
	b := h.Base()
	if k := t.keys[b.Key]; k != nil && k.hold == h {
		var none H
		k.hold = none
		if k.refs == 0 {
			delete(t.keys, b.Key)
		}
	}
	t.detach(h)
}

// EndLocked ends h: it marks it lost, detaches it, and appends the Lost
// callbacks of its handles to lost, for the caller to call once the mutex
// is released. It is for holds that are live (a session's, when the
// session ends).
func (t *Table[H]) EndLocked(h H, lost []func(error)) []func(error) {
	b := h.Base()
	b.Lost = true
	t.detachLocked(h)
	return b.lostCallbacks(lost, nil)
}

// Gone ends h, unless it has ended already, with cause: it marks it lost,
// detaches it, and calls the Lost callbacks of its handles other than
// except (nil: all) with cause.
func (t *Table[H]) Gone(h H, cause error, except *Handle) {
	t.mu.Lock()
	b := h.Base()
	if b.Lost {
		t.mu.Unlock()
		return
	}
	b.Lost = true
	t.detachLocked(h)
	lost := b.lostCallbacks(nil, except)
	t.mu.Unlock()
	for _, f := range lost {
		f(cause)
	}
}

// MaxPublishRounds bounds the writes of one Publish call while other
// nested acquisitions or releases keep changing the count.
const MaxPublishRounds = 8

// Publish writes h's current count with write, which reports whether the
// tenure still exists (false ends the call), so that the write doubles as
// the check a nested acquisition or release makes. Calls are serialised
// per hold, waiting at most until ctx ends (the error is ctxErr's), and a
// call writes again while the count changed under it. A count of 0 is not
// written (the last release removes the tenure): Publish returns true.
func (t *Table[H]) Publish(ctx context.Context, h H, ctxErr func() error, write func(ctx context.Context, n int) (bool, error)) (bool, error) {
	b := h.Base()
	t.mu.Lock()
	if b.pub == nil {
		b.pub = make(chan struct{}, 1)
	}
	pub := b.pub
	t.mu.Unlock()
	select {
	case pub <- struct{}{}:
	case <-ctx.Done():
		return false, ctxErr()
	}
	defer func() { <-pub }()
	for range MaxPublishRounds {
		t.mu.Lock()
		n := b.Count
		t.mu.Unlock()
		if n == 0 {
			return true, nil
		}
		held, err := write(ctx, n)
		if err != nil || !held {
			return false, err
		}
		t.mu.Lock()
		again := b.Count != n
		t.mu.Unlock()
		if !again {
			break
		}
	}
	return true, nil
}
