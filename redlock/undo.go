package redlock

import (
	"context"
	"errors"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/redisscript"
)

const (
	// maxUndoPerNode bounds the undos running at once, per node; beyond
	// that an orphan hold is left to its TTL.
	maxUndoPerNode = 64
	// undoTimeout bounds each background undo.
	undoTimeout = 5 * time.Second
)

// holdRef names one hold: the lock's keys, its owner and the hold id
// unique to one acquisition.
type holdRef struct {
	keys  redisscript.Keys
	owner string
	hold  string
}

// undoMode says what is known of the hold an undo removes.
type undoMode uint8

const (
	// undoLost: the hold is on the node or not (a release's answer was
	// lost, or the node granted an attempt that failed); retried with
	// backoff until a try gets an answer.
	undoLost undoMode = iota
	// undoInFlight: the acquire of the hold may still reach the node (a
	// timeout after the request was sent: the node may be slow or paused),
	// so a release can come too early and find nothing. Tried on
	// inFlightSchedule until a try finds and removes the hold; the group's
	// Close cuts the schedule short after one more try.
	undoInFlight
)

// inFlightSchedule: when an undoInFlight tries, from its start (about 4.5s).
var inFlightSchedule = async.At{0, 100 * time.Millisecond, 500 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second, 4500 * time.Millisecond}

// undo removes h from node i in the background, owner-checked (the unique
// hold id identifies the acquisition), within min(within, undoTimeout) —
// after which the TTL frees the lock anyway — or until the client is
// closed. When too many undos are running it does nothing and leaves the
// hold to its TTL. child as for async.Group.GoChild: the caller is work of
// d.g.
func (d *driver) undo(i int, h holdRef, within time.Duration, mode undoMode, child bool) {
	c := d.nodes[i].client
	r := async.Retry{Schedule: async.Backoff{First: 20 * time.Millisecond, Max: time.Second}, Within: min(within, undoTimeout)}
	if mode == undoInFlight {
		r = async.Retry{Schedule: inFlightSchedule, Within: min(within, undoTimeout), TryTimeout: 500 * time.Millisecond, Quit: d.g.Quit()}
	}
	async.GoBounded(d.g, d.undoSlots, child, func() {
		r.Do(context.Background(), func(ctx context.Context) bool {
			res, err := redisscript.Release(ctx, c, h.keys, h.owner, 0, h.hold)
			if errors.Is(err, goredis.ErrClosed) {
				return true
			}
			if mode == undoInFlight {
				return err == nil && res != redisscript.NotHeld
			}
			return !redisscript.Ambiguous(err)
		})
	})
}
