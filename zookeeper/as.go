package zookeeper

import "time"

// Session is a Locker's ZooKeeper session as it is now; a *Session target
// of (*distlock.Locker).As gets it. A lost session is replaced by a new
// one, so ask again rather than keep the values.
type Session struct{ d *driver }

// Timeout returns the negotiated timeout of the current session, 0 before
// a session is established.
func (s Session) Timeout() time.Duration {
	if c := s.d.current(); c != nil {
		return c.timeout
	}
	return 0
}

// ID returns the id of the current session, 0 before a session is
// established.
func (s Session) ID() int64 {
	if c := s.d.current(); c != nil {
		return c.id
	}
	return 0
}

// As answers (*distlock.Locker).As: *Session gets the Locker's session.
func (d *driver) As(target any) bool {
	if t, ok := target.(**driver); ok { // for this package's tests
		*t = d
		return true
	}
	if t, ok := target.(*Session); ok {
		*t = Session{d}
		return true
	}
	return false
}
