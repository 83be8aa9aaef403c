package postgres

import (
	"context"
	"time"

	"github.com/distlock/distlock"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// Test hooks: the backend pids of an advisory Locker's pinned sessions, for
// pg_terminate_backend fault injection.

// PinnedPIDs returns the server backend pids of every lock l holds in
// advisory mode.
func PinnedPIDs(l *distlock.Locker) []uint32 {
	if advOf(l) == nil {
		return nil
	}
	var pids []uint32
	for _, id := range advOf(l).t.IDs("") {
		pids = append(pids, uint32(id))
	}
	return pids
}

// PinnedPID returns the backend pid of the session holding key in advisory
// mode.
func PinnedPID(l *distlock.Locker, key string) (uint32, bool) {
	if advOf(l) == nil {
		return 0, false
	}
	if ids := advOf(l).t.IDs(key); len(ids) > 0 {
		return uint32(ids[0]), true
	}
	return 0, false
}

// LockID exposes lockID.
var LockID = lockID

// RowAcquireRaw runs the row-mode acquire statement with request id id, as
// an acquire whose reply was lost would have run it.
func RowAcquireRaw(ctx context.Context, l *distlock.Locker, key, owner string, id []byte, ttl time.Duration) error {
	d := newRowDriver(driverOf(l).common(), false)
	if err := d.ready(ctx); err != nil {
		return err
	}
	var fence *int64
	var remaining int64
	return d.pool.QueryRow(ctx, d.qAcquire, []byte(key), []byte(owner), id, ttlMicros(ttl), []byte(nil), floorKey(key)).Scan(&fence, &remaining)
}

// RowAbandon starts the background give-back of request id, as a lost
// acquire does.
func RowAbandon(l *distlock.Locker, key, owner string, id []byte, ttl time.Duration) {
	newRowDriver(driverOf(l).common(), false).abandon([]byte(key), []byte(owner), id, ttl)
}

// Driver returns l's backend driver.
func Driver(l *distlock.Locker) backend.Driver { return driverOf(l) }

// Watching reports how many waiters of key l's release listener (WithNotify)
// would wake now, and whether it is listening (so a release is heard).
func Watching(l *distlock.Locker, key string) (int, bool) {
	nd, ok := driverOf(l).(notifyRowDriver)
	if !ok {
		return 0, false
	}
	ln := nd.listen
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return len(ln.watchers[keyTag(key)]), ln.listening
}

// CleanupNow runs l's row-mode cleanup passes now, as the background loop
// does, and returns the rows deleted.
func CleanupNow(ctx context.Context, l *distlock.Locker, grace time.Duration, batch int) (int, error) {
	if err := driverOf(l).common().ready(ctx); err != nil {
		return 0, err
	}
	return sqllock.RunCleanup(ctx, sqllock.Cleanup{Interval: time.Hour, Grace: grace, Batch: batch}, driverOf(l).common().cleanup)
}

// FloorKey exposes floorKey.
var FloorKey = floorKey

// ShiftClock moves l's reading of the client's wall clock by d (before l
// is used): a row-mode Locker must behave the same, as its statements take
// every time from the server.
func ShiftClock(l *distlock.Locker, d time.Duration) {
	driverOf(l).common().Now = func() time.Time { return time.Now().Add(d) }
}

// advOf is l's advisory driver, nil in the other mode.
func advOf(l *distlock.Locker) *advDriver {
	d, _ := driverOf(l).(*advDriver)
	return d
}
