package mysql

import (
	"context"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"

	"github.com/distlock/distlock/internal/sqllock"
)

// Driver returns l's backend driver.
func Driver(l *distlock.Locker) backend.Driver { return driverOf(l) }

// Test hooks: the connection ids of a forupdate Locker's pinned
// connections, for KILL CONNECTION fault injection.

// PinnedConnIDs returns the server connection ids of every lock l holds in
// forupdate mode.
func PinnedConnIDs(l *distlock.Locker) []int64 {
	if fuOf(l) == nil {
		return nil
	}
	return fuOf(l).t.IDs("")
}

// PinnedConnID returns the connection id holding key in forupdate mode.
func PinnedConnID(l *distlock.Locker, key string) (int64, bool) {
	if fuOf(l) == nil {
		return 0, false
	}
	if ids := fuOf(l).t.IDs(key); len(ids) > 0 {
		return ids[0], true
	}
	return 0, false
}

// PinnedCount returns how many connections l has pinned (held locks and
// acquisitions in progress).
func PinnedCount(l *distlock.Locker) int {
	if fuOf(l) == nil {
		return 0
	}
	return fuOf(l).t.Pinned()
}

// TTLMicros exposes ttlMicros.
var TTLMicros = ttlMicros

// CleanupNow runs l's row-mode cleanup passes now, as the background loop
// does, and returns the rows deleted.
func CleanupNow(ctx context.Context, l *distlock.Locker, grace time.Duration, batch int) (int, error) {
	if err := driverOf(l).common().ready(ctx); err != nil {
		return 0, err
	}
	return sqllock.RunCleanup(ctx, sqllock.Cleanup{Interval: time.Hour, Grace: grace, Batch: batch}, driverOf(l).common().cleanup)
}

// FloorHash exposes floorHash.
var FloorHash = floorHash

// RowAcquireSQL returns l's row-mode acquire and release statements, and
// the arguments of one acquisition of key by owner (hold id fixed) with
// the TTL in µs, and of its release.
func RowAcquireSQL(l *distlock.Locker, key, owner string, us int64) (acquire, release string, acqArgs, relArgs []any) {
	d := newRowDriver(driverOf(l).common())
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
func FloorReadSQL(l *distlock.Locker) string {
	return "(SELECT f.fence FROM (SELECT fence FROM " + driverOf(l).common().Table + " WHERE key_hash = ?) AS f)"
}

// ShiftClock moves l's reading of the client's wall clock by d (before l
// is used): a row-mode Locker must behave the same, as its statements take
// every time from the server.
func ShiftClock(l *distlock.Locker, d time.Duration) {
	driverOf(l).common().Now = func() time.Time { return time.Now().Add(d) }
}

// SetUndoSchedule sets when l's give-back of a lost acquisition's hold
// tries (offsets from the first try), before l is used.
func SetUndoSchedule(l *distlock.Locker, at ...time.Duration) { driverOf(l).common().UndoSchedule = at }

// fuOf is l's forupdate driver, nil in the other mode.
func fuOf(l *distlock.Locker) *fuDriver {
	d, _ := driverOf(l).(*fuDriver)
	return d
}
