package redlock

import (
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
)

// As answers (*distlock.Locker).As: a *[]goredis.UniversalClient target
// gets the masters' clients, in node order.
func (d *driver) As(target any) bool {
	if t, ok := target.(**driver); ok { // for this package's tests
		*t = d
		return true
	}
	if t, ok := target.(*[]goredis.UniversalClient); ok {
		cs := make([]goredis.UniversalClient, len(d.nodes))
		for i, n := range d.nodes {
			cs[i] = n.client
		}
		*t = cs
		return true
	}
	return false
}

// PermitCapabilities implements backend.Permitter: Redlock has no
// semaphores, and the error says why.
func (d *driver) PermitCapabilities() (backend.Capabilities, error) {
	return backend.Capabilities{}, fmt.Errorf("%w: the redlock backend has no semaphores: a permit count needs one atomic view of every holder, which independent masters with a quorum cannot give (two quorums can each see a free permit); use redis:// on one server, Sentinel or Cluster", backend.ErrInvalidOption)
}
