package etcd

import (
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Session is a Locker's etcd session (its lease) as it is now; a *Session
// target of (*distlock.Locker).As gets it. A lost session is replaced by a
// new one, so ask again rather than keep the values.
type Session struct{ d *driver }

// LeaseID returns the id of the current session's etcd lease, 0 before a
// session is established or after it was lost.
func (s Session) LeaseID() clientv3.LeaseID {
	if c := s.d.current(); c != nil {
		return c.id
	}
	return 0
}

// TTL returns the TTL the cluster granted the current session's lease, 0
// when there is none.
func (s Session) TTL() time.Duration {
	if c := s.d.current(); c != nil {
		return c.ttl
	}
	return 0
}

// As answers (*distlock.Locker).As: *Session gets the Locker's session,
// **clientv3.Client its client.
func (d *driver) As(target any) bool {
	switch t := target.(type) {
	case **driver: // for this package's tests
		*t = d
	case *Session:
		*t = Session{d}
	case **clientv3.Client:
		*t = d.client
	default:
		return false
	}
	return true
}
