package memory

// Waiters reports how many acquisitions wait for key in ns.
func Waiters(ns *Namespace, key string) int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if e := ns.locks[key]; e != nil {
		return len(e.waiters)
	}
	return 0
}
