package mysql

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
