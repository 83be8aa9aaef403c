package redlock

// lock is one hold granted by a quorum.
type lock struct {
	d *driver
	holdRef
	// pending has the nodes whose acquire was still running when the
	// quorum was in: a release on such a node must not overtake it. Nil if
	// there were none.
	pending *pendingNodes
	// unsure[i]: the acquire's answer from node i was lost (read after
	// pending.wait(i), if not nil, is closed).
	unsure    []bool
	unsureBuf [inlineNodes]bool
}

// Token is always 0: Redlock has no fencing token (see the package
// documentation).
func (l *lock) Token() uint64 { return 0 }

// undo removes this hold from node i in the background, after a release
// whose answer was lost (or that came before the acquire).
func (l *lock) undo(i int, child bool) {
	mode := undoLost
	if l.unsure[i] {
		mode = undoInFlight
	}
	l.d.undo(i, l.holdRef, undoTimeout, mode, child)
}
