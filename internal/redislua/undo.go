package redislua

import (
	"context"
	"errors"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/async"
)

// Undoer runs a Redis-based driver's background work on an async.Group:
// round trips whose caller's context ended first (async.Call on Group), and
// the owner-checked undo of operations whose outcome is unknown, each a
// Release of one hold on an async.Retry schedule. Close waits for all of
// it. Safe for concurrent use.
type Undoer struct {
	g     *async.Group
	slots async.Slots // bounds Undo and UndoAcquire, not Leave
}

// DefaultMaxUndo bounds the concurrent undo operations of an Undoer made
// with NewUndoer(0).
const DefaultMaxUndo = 64

// UndoTimeout bounds each background undo.
const UndoTimeout = 5 * time.Second

// NewUndoer returns an Undoer with a group of its own that runs at most
// maxUndo undo operations at once (DefaultMaxUndo if maxUndo <= 0); beyond
// that an orphan hold is left to its TTL.
func NewUndoer(maxUndo int) *Undoer {
	if maxUndo <= 0 {
		maxUndo = DefaultMaxUndo
	}
	return &Undoer{g: async.NewGroup(), slots: async.NewSlots(maxUndo)}
}

// NewUndoerOn is NewUndoer whose work runs on g, a group its owner closes
// (Close then need not be called): for a driver that already runs its own
// fan-out on g, so that one Close waits for both.
func NewUndoerOn(g *async.Group, maxUndo int) *Undoer {
	if maxUndo <= 0 {
		maxUndo = DefaultMaxUndo
	}
	return &Undoer{g: g, slots: async.NewSlots(maxUndo)}
}

// Group returns the group the Undoer's work runs on, for async.Call.
func (u *Undoer) Group() *async.Group { return u.g }

// Go runs fn on the group (child: started by work of the group, see
// async.Group.GoChild) and reports whether it did.
func (u *Undoer) Go(fn func(), child bool) bool {
	if child {
		return u.g.GoChild(fn)
	}
	return u.g.Go(fn)
}

// Close stops new work and waits until all of it has returned: an
// UndoAcquire keeps its schedule (at most UndoTimeout) while the server
// answers, and ends at its first unanswered try.
func (u *Undoer) Close() { u.g.Close() }

// undoAcquireSchedule: when UndoAcquire tries, from its start.
var undoAcquireSchedule = async.At{0, 100 * time.Millisecond, 500 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second, 4500 * time.Millisecond}

// undoBackoff: the pauses between the tries of Undo and Leave.
var undoBackoff = async.Backoff{First: 20 * time.Millisecond, Max: time.Second}

// Undo removes one hold in the background, owner-checked (see Release;
// token 0 does not check the token, the unique hold id identifies the
// acquisition), retrying with backoff while the failure is Ambiguous until
// it gets an answer from the server, the client is closed, or min(within,
// UndoTimeout) passes — after which the TTL frees the lock anyway. When too
// many undo operations are running it does nothing and leaves the hold to
// its TTL. child as for Go.
func (u *Undoer) Undo(c goredis.Scripter, k Keys, owner string, token uint64, hold string, within time.Duration, child bool) {
	async.GoBounded(u.g, u.slots, child, func() {
		u.release(c, k, owner, token, hold, within, Ambiguous)
	})
}

// UndoAcquire removes, in the background and owner-checked, the hold of an
// acquire whose outcome is unknown because its request may still be on its
// way (a timeout after sending it; the node may be slow or paused). One
// release can come too early — it finds nothing and the acquire lands
// after it — so it tries several times, spaced out over about 4.5s
// (bounded by within, and each try by half a second), until a try finds
// and removes the hold or the client is closed; after Close began, the
// first try that gets no answer ends it. When too many undo operations are running it
// does nothing and leaves the hold to its TTL. child as for Go.
func (u *Undoer) UndoAcquire(c goredis.Scripter, k Keys, owner string, token uint64, hold string, within time.Duration, child bool) {
	async.GoBounded(u.g, u.slots, child, func() {
		u.onSchedule(c, k, owner, token, hold, within)
	})
}

// Leave ends a wait in a fair lock's queue (k from Keys.Fair) in the
// background: it removes hold from the queue and releases the lock if it
// was granted to hold. Unlike Undo it is never dropped for lack of an undo
// slot — a waiter left in the queue could be granted a lock that no one
// would use until its TTL — so it costs at most one pooled goroutine per
// departing waiter. inFlight says that an attempt of hold may still reach
// the server: Leave then repeats on UndoAcquire's schedule, so that an
// attempt landing after the first try is undone too; otherwise it retries
// any failure with backoff until one try succeeds, within UndoTimeout.
// child as for Go.
func (u *Undoer) Leave(c goredis.Scripter, k Keys, owner, hold string, inFlight, child bool) {
	u.Go(func() {
		if inFlight {
			u.onSchedule(c, k, owner, 0, hold, UndoTimeout)
			return
		}
		u.release(c, k, owner, 0, hold, UndoTimeout, func(error) bool { return true })
	}, child)
}

// release calls Release until it succeeds or fails with an error retry
// does not accept, the client is closed, or min(within, UndoTimeout) passes.
func (u *Undoer) release(c goredis.Scripter, k Keys, owner string, token uint64, hold string, within time.Duration, retry func(error) bool) {
	async.Retry{Schedule: undoBackoff, Within: min(within, UndoTimeout)}.Do(context.Background(), func(ctx context.Context) bool {
		_, err := Release(ctx, c, k, owner, token, hold)
		return err == nil || !retry(err) || errors.Is(err, goredis.ErrClosed)
	})
}

// onSchedule is UndoAcquire's work: a Release at each offset of
// undoAcquireSchedule until one finds and removes the hold. Close does not
// cut the schedule short while the server answers: the request being
// undone may still be on its way, and one early last try would find
// nothing and leave the lock for its whole TTL. Once Close has begun, a try
// that gets no answer ends it (nothing listens, or the node is stopped).
func (u *Undoer) onSchedule(c goredis.Scripter, k Keys, owner string, token uint64, hold string, within time.Duration) {
	async.Retry{Schedule: undoAcquireSchedule, Within: min(within, UndoTimeout), TryTimeout: 500 * time.Millisecond}.Do(context.Background(), func(ctx context.Context) bool {
		r, err := Release(ctx, c, k, owner, token, hold)
		if err != nil && u.g.Closing() {
			return true
		}
		return (err == nil && r != NotHeld) || errors.Is(err, goredis.ErrClosed)
	})
}
