package mysql

// Test hooks: the connection ids of a forupdate Locker's pinned
// connections, for KILL CONNECTION fault injection.

// PinnedConnIDs returns the server connection ids of every lock l holds in
// forupdate mode.
func PinnedConnIDs(l *Locker) []int64 {
	if l.fu == nil {
		return nil
	}
	l.fu.mu.Lock()
	defer l.fu.mu.Unlock()
	var ids []int64
	for _, e := range l.fu.entries {
		if e.state == held {
			ids = append(ids, e.connID)
		}
	}
	return ids
}

// PinnedConnID returns the connection id holding key in forupdate mode.
func PinnedConnID(l *Locker, key string) (int64, bool) {
	if l.fu == nil {
		return 0, false
	}
	l.fu.mu.Lock()
	defer l.fu.mu.Unlock()
	for k, e := range l.fu.entries {
		if k.key == key && e.state == held {
			return e.connID, true
		}
	}
	return 0, false
}

// PinnedCount returns how many connections l has pinned (held locks and
// acquisitions in progress).
func PinnedCount(l *Locker) int {
	if l.fu == nil {
		return 0
	}
	l.fu.mu.Lock()
	defer l.fu.mu.Unlock()
	return l.fu.pinned
}

// TTLMicros exposes ttlMicros.
var TTLMicros = ttlMicros
