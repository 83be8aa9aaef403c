package redlock

import (
	"time"

	"github.com/distlock/distlock/internal/redislua"
)

// maxUndoPerNode bounds the undos running at once, per node; beyond that
// an orphan hold is left to its TTL.
const maxUndoPerNode = redislua.DefaultMaxUndo

// undoTimeout bounds each background undo.
const undoTimeout = redislua.UndoTimeout

// holdRef names one hold: the lock's keys, its owner and the hold id
// unique to one acquisition.
type holdRef struct {
	keys  redislua.Keys
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
	// inFlightSchedule until a try finds and removes the hold; after the
	// group's Close began, the first try that gets no answer ends it.
	undoInFlight
)

// undo removes h from node i in the background, owner-checked (the unique
// hold id identifies the acquisition), within min(within, undoTimeout) —
// after which the TTL frees the lock anyway — or until the client is
// closed: redislua's Undoer, on the driver's group. When too many undos
// are running it does nothing and leaves the hold to its TTL. child as for
// async.Group.GoChild: the caller is work of d.g.
func (d *driver) undo(i int, h holdRef, within time.Duration, mode undoMode, child bool) {
	c := d.nodes[i].client
	if mode == undoInFlight {
		d.undoer.UndoAcquire(c, h.keys, h.owner, 0, h.hold, within, child)
		return
	}
	d.undoer.Undo(c, h.keys, h.owner, 0, h.hold, within, child)
}
