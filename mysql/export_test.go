package mysql

import (
	"context"
	"time"

	"github.com/distlock/distlock/internal/sqllock"
)

// Test hooks: the connection ids of a forupdate Locker's pinned
// connections, for KILL CONNECTION fault injection.

// PinnedConnIDs returns the server connection ids of every lock l holds in
// forupdate mode.
func PinnedConnIDs(l *Locker) []int64 {
	if l.fu == nil {
		return nil
	}
	return l.fu.t.IDs("")
}

// PinnedConnID returns the connection id holding key in forupdate mode.
func PinnedConnID(l *Locker, key string) (int64, bool) {
	if l.fu == nil {
		return 0, false
	}
	if ids := l.fu.t.IDs(key); len(ids) > 0 {
		return ids[0], true
	}
	return 0, false
}

// PinnedCount returns how many connections l has pinned (held locks and
// acquisitions in progress).
func PinnedCount(l *Locker) int {
	if l.fu == nil {
		return 0
	}
	return l.fu.t.Pinned()
}

// TTLMicros exposes ttlMicros.
var TTLMicros = ttlMicros

// CleanupNow runs l's row-mode cleanup passes now, as the background loop
// does, and returns the rows deleted.
func CleanupNow(ctx context.Context, l *Locker, grace time.Duration, batch int) (int, error) {
	if err := l.b.ready(ctx); err != nil {
		return 0, err
	}
	return sqllock.RunCleanup(ctx, sqllock.Cleanup{Interval: time.Hour, Grace: grace, Batch: batch}, l.b.cleanup)
}

// FloorHash exposes floorHash.
var FloorHash = floorHash

// RowAcquireSQL returns l's row-mode acquire and release statements, and
// the arguments of one acquisition of key by owner (hold id fixed) with
// the TTL in µs, and of its release.
func RowAcquireSQL(l *Locker, key, owner string, us int64) (acquire, release string, acqArgs, relArgs []any) {
	d := newRowDriver(l.b)
	h := keyHash(key)
	floor := floorHash(h)
	hold := newHoldID()
	o := []byte(owner)
	md := []byte("metadata")
	return d.qAcquire, d.qRelease,
		[]any{h[:], []byte(key), o, us, floor[:], hold[:], md, o, o, o, hold[:], o, hold[:], md, us, o, us},
		[]any{hold[:], h[:], o}
}

// FloorReadSQL is the floor read in the acquire statement of l's table.
func FloorReadSQL(l *Locker) string {
	return "(SELECT f.fence FROM (SELECT fence FROM " + l.b.Table + " WHERE key_hash = ?) AS f)"
}

// ShiftClock moves l's reading of the client's wall clock by d (before l
// is used): a row-mode Locker must behave the same, as its statements take
// every time from the server.
func ShiftClock(l *Locker, d time.Duration) { l.b.Now = func() time.Time { return time.Now().Add(d) } }

// SetUndoSchedule sets when l's give-back of a lost acquisition's hold
// tries (offsets from the first try), before l is used.
func SetUndoSchedule(l *Locker, at ...time.Duration) { l.b.UndoSchedule = at }
