package postgres

// Test hooks: the backend pids of an advisory Locker's pinned sessions, for
// pg_terminate_backend fault injection.

// PinnedPIDs returns the server backend pids of every lock l holds in
// advisory mode.
func PinnedPIDs(l *Locker) []uint32 {
	if l.adv == nil {
		return nil
	}
	l.adv.mu.Lock()
	defer l.adv.mu.Unlock()
	var pids []uint32
	for _, e := range l.adv.entries {
		if e.state == held {
			pids = append(pids, e.pid)
		}
	}
	return pids
}

// PinnedPID returns the backend pid of the session holding key in advisory
// mode.
func PinnedPID(l *Locker, key string) (uint32, bool) {
	if l.adv == nil {
		return 0, false
	}
	l.adv.mu.Lock()
	defer l.adv.mu.Unlock()
	for k, e := range l.adv.entries {
		if k.key == key && e.state == held {
			return e.pid, true
		}
	}
	return 0, false
}

// LockID exposes lockID.
var LockID = lockID
