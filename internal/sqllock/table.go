package sqllock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock/backend"
)

// Server is a driver's side of locks held on pinned connections: the SQL
// that takes, checks and gives up a lock, and how its server discards a
// connection. C is the driver's pinned connection.
type Server[C any] interface {
	// Lock pins a connection and takes req.Key's lock in its session,
	// waiting in the server when wait is set, and records the holder
	// (req.Owner, req.Metadata) where an operator can read it. On error
	// nothing stays pinned: the connection is back in the pool holding
	// nothing, or discarded.
	Lock(ctx context.Context, req backend.Request, wait bool) (Pinned[C], error)
	// Ping proves the session alive and still the one that took the
	// lock. Its ctx is the keepalive's, never a caller's (a cancelled
	// command would break the connection and so drop the lock).
	Ping(ctx context.Context, conn C) error
	// Unlock gives up the lock of its last hold and returns the
	// connection to the pool, or discards it; its error is Release's.
	Unlock(ctx context.Context, p *Pinned[C]) error
	// Discard closes the connection of a session that failed, never
	// returning it to the pool: the server frees what it held.
	Discard(conn C)
	// Abandon discards the connection of a lock still held when the
	// driver closes (rolling back first, bounded, where that helps).
	Abandon(conn C)
}

// HoldRecorder is implemented by a Server that records the number of
// nested holds of a lock for operators: RecordHolds adds delta (+1 when an
// owner nests, -1 when it gives up a hold that is not its last) to the
// record of p's lock of key, and reports whether that record still shows
// p's tenure (p.Token): false when the lock has passed to a newer holder.
type HoldRecorder[C any] interface {
	RecordHolds(ctx context.Context, key string, p Pinned[C], delta int) (current bool, err error)
}

// Pinned is a connection whose session holds a lock.
type Pinned[C any] struct {
	Conn  C
	ID    int64         // the server's id of the session: connection id, backend pid
	Token uint64        // the fencing token of the lock
	Bound time.Duration // how long the server lets the session stay silent
	Sent  time.Time     // when its last command that succeeded was sent
}

// TableConfig describes a Table's driver.
type TableConfig struct {
	// Keepalive is the longest interval between checks of a pinned
	// connection (at most a third of its Bound is used).
	Keepalive time.Duration
	// Noun names a pinned connection in errors: "connection", "session".
	Noun string
	// IDName names Pinned.ID in errors: "id", "backend pid".
	IDName string
	// Limit, if not nil, refuses one more pinned connection when pinned
	// are already: it fails at once instead of waiting for the pool.
	Limit func(pinned int) error
}

// Table keeps the locks of one driver that are held on pinned connections:
// one entry per (key, owner), whose connection holds the server's lock
// once, shared by the owner's nested holds; the last Release gives it up.
// Safe for concurrent use.
type Table[C any] struct {
	srv         Server[C]
	base        *Base
	cfg         TableConfig
	pingTimeout time.Duration

	mu      sync.Mutex
	entries map[entryKey]*entry[C]
	pinned  int // connections of held locks and of acquisitions in progress
	closing bool
}

// NewTable returns an empty Table of srv; background checks run on base.
func NewTable[C any](srv Server[C], base *Base, cfg TableConfig) *Table[C] {
	return &Table[C]{
		srv: srv, base: base, cfg: cfg,
		pingTimeout: max(2*cfg.Keepalive, 5*time.Second),
		entries:     map[entryKey]*entry[C]{},
	}
}

type entryKey struct{ key, owner string }

type entryState uint8

const (
	acquiring entryState = iota
	held
	gone
)

// entry is one owner's lock on one key.
type entry[C any] struct {
	k     entryKey
	state entryState
	ready chan struct{} // closed when the state leaves acquiring
	p     Pinned[C]
	// lastOK is when the last command that succeeded on the connection
	// was sent (guarded by Table.mu).
	lastOK time.Time
	locks  map[*Hold[C]]func(error) // live holds and their Lost callbacks
	stopKA chan struct{}
	kaDone chan struct{}
	// connMu serializes the use of the connection once the lock is held
	// (checks from the keepalive and from Refresh, the unlock, the
	// discard): after it is released or discarded it is not touched.
	connMu sync.Mutex
}

// deadline is when the server may end the entry's silent session: the last
// command that succeeded plus its bound, less IdleMargin. Callers hold
// Table.mu.
func (e *entry[C]) deadline() time.Time {
	return e.lastOK.Add(e.p.Bound - IdleMargin(e.p.Bound))
}

// IdleMargin is how long before the server's limit may end a silent session
// the holder declares its lock lost: a clock rate difference of 1% plus
// 100ms.
func IdleMargin(bound time.Duration) time.Duration { return bound/100 + 100*time.Millisecond }

// Acquire takes key's lock for req.Owner: a nested hold when the owner's
// connection already holds it, else a new pinned connection (Server.Lock).
// With wait it waits inside the server, and an error after ctx ended wraps
// ErrNotAcquired.
//
// A nested hold is granted only once the server has confirmed that the
// owner's session still holds the lock (join): the server may have ended
// it (an operator's ForceRelease, a terminated session, a restart) before
// the keepalive noticed. When it has, the owner's holds end (ErrLockLost)
// and the acquisition goes on as a new one, which the server grants or
// refuses as it would any other owner's.
func (t *Table[C]) Acquire(ctx context.Context, req backend.Request, wait bool) (backend.Lock, error) {
	l, err := t.acquire(ctx, req, wait)
	if err != nil {
		if wait && ctx.Err() != nil && !errors.Is(err, backend.ErrNotAcquired) {
			err = fmt.Errorf("%w: %w", backend.ErrNotAcquired, err)
		}
		return nil, err
	}
	return l, nil
}

func (t *Table[C]) acquire(ctx context.Context, req backend.Request, wait bool) (*Hold[C], error) {
	for {
		e, joined, err := t.enter(ctx, req, wait)
		if err != nil {
			return nil, err
		}
		if joined == nil {
			p, err := t.srv.Lock(ctx, req, wait)
			return t.settle(e, req.Lost, p, err)
		}
		h, ended, err := t.join(ctx, joined, req.Lost)
		if !ended {
			return h, err
		}
		// The owner's hold ended meanwhile: acquire anew.
	}
}

// join nests a hold into the owner's held entry e once the server confirms
// that e's session still holds the lock: a check of its pinned connection
// (which ends e when it fails), then, with a HoldRecorder, the record of one
// more hold, which must still show e's tenure. ended reports that e ended
// before the hold was granted.
func (t *Table[C]) join(ctx context.Context, e *entry[C], lost func(error)) (h *Hold[C], ended bool, err error) {
	res := make(chan bool, 1)
	if !t.base.Go(func(context.Context) { res <- t.check(e) }) {
		return nil, false, backend.ErrClosed
	}
	select {
	case alive := <-res:
		if !alive {
			return nil, true, nil
		}
	case <-ctx.Done():
		return nil, false, NoAnswer(ctx, nil)
	}
	h = &Hold[C]{t: t, e: e}
	t.mu.Lock()
	if e.state != held {
		t.mu.Unlock()
		return nil, true, nil
	}
	// Counted now, so a concurrent last Release keeps the lock.
	e.locks[h] = lost
	t.mu.Unlock()
	rec, ok := t.srv.(HoldRecorder[C])
	if !ok {
		return h, false, nil
	}
	current, err := rec.RecordHolds(ctx, e.k.key, e.p, 1)
	switch {
	case err != nil:
		t.giveUp(h)
		return nil, false, err
	case !current:
		t.giveUp(h)
		t.end(e, errors.New("the server's record shows a newer holder of the lock"))
		return nil, true, nil
	}
	return h, false, nil
}

// giveUp gives up a hold that join reserved but did not grant: the lock
// too when it was the last hold.
func (t *Table[C]) giveUp(h *Hold[C]) {
	ctx, cancel := context.WithTimeout(context.Background(), t.pingTimeout)
	defer cancel()
	_ = h.release(ctx, false)
}

// end ends a held entry the server no longer holds for it (lost).
func (t *Table[C]) end(e *entry[C], cause error) {
	e.connMu.Lock()
	defer e.connMu.Unlock()
	t.lost(e, cause, nil)
}

// enter returns the owner's held entry to join, or a new entry in state
// acquiring (with its connection counted) for the caller to settle. It
// waits for the same owner's acquisition in progress rather than queue
// behind it in the server.
func (t *Table[C]) enter(ctx context.Context, req backend.Request, wait bool) (fresh, joined *entry[C], err error) {
	ek := entryKey{req.Key, req.Owner}
	for {
		t.mu.Lock()
		if t.closing {
			t.mu.Unlock()
			return nil, nil, backend.ErrClosed
		}
		cur := t.entries[ek]
		switch {
		case cur != nil && cur.state == held:
			t.mu.Unlock()
			return nil, cur, nil
		case cur != nil:
			ch := cur.ready
			t.mu.Unlock()
			if !wait {
				return nil, nil, backend.Busy(0)
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, nil, WaitCut(ctx, nil)
			}
		default:
			if t.cfg.Limit != nil {
				if err := t.cfg.Limit(t.pinned); err != nil {
					t.mu.Unlock()
					return nil, nil, err
				}
			}
			t.pinned++
			e := &entry[C]{k: ek, state: acquiring, ready: make(chan struct{}), locks: map[*Hold[C]]func(error){}}
			t.entries[ek] = e
			t.mu.Unlock()
			return e, nil, nil
		}
	}
}

// settle records the outcome of e's acquisition: the first hold and its
// keepalive, or the entry's removal. A lock granted after Close began is
// given back with its connection.
func (t *Table[C]) settle(e *entry[C], lost func(error), p Pinned[C], err error) (*Hold[C], error) {
	t.mu.Lock()
	close(e.ready)
	abandon := err == nil && t.closing
	if abandon {
		err = backend.ErrClosed
	}
	if err != nil {
		e.state = gone
		if t.entries[e.k] == e {
			delete(t.entries, e.k)
		}
		t.pinned--
		t.mu.Unlock()
		if abandon {
			t.srv.Abandon(p.Conn)
		}
		return nil, err
	}
	e.state, e.p, e.lastOK = held, p, p.Sent
	h := &Hold[C]{t: t, e: e}
	e.locks[h] = lost
	e.stopKA, e.kaDone = make(chan struct{}), make(chan struct{})
	t.mu.Unlock()
	go t.keepalive(e)
	return h, nil
}

// Close discards the connections of locks still held (distlock has released
// its leases before), which ends their locks, and stops their keepalives.
// Acquisitions in progress give their lock back when they end.
func (t *Table[C]) Close() {
	t.mu.Lock()
	t.closing = true
	var rest []*entry[C]
	for _, e := range t.entries {
		if e.state == held {
			e.state = gone
			rest = append(rest, e)
		}
	}
	clear(t.entries)
	t.mu.Unlock()
	for _, e := range rest {
		close(e.stopKA)
		<-e.kaDone
		e.connMu.Lock()
		t.srv.Abandon(e.p.Conn)
		e.connMu.Unlock()
		t.unpin()
	}
}

func (t *Table[C]) unpin() {
	t.mu.Lock()
	t.pinned--
	t.mu.Unlock()
}

// IDs returns the session ids (Pinned.ID) of the held locks of key, or of
// every held lock when key is "": for fault injection in tests.
func (t *Table[C]) IDs(key string) []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ids []int64
	for k, e := range t.entries {
		if e.state == held && (key == "" || k.key == key) {
			ids = append(ids, e.p.ID)
		}
	}
	return ids
}

// Pinned returns how many connections are pinned: held locks and
// acquisitions in progress.
func (t *Table[C]) Pinned() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pinned
}
