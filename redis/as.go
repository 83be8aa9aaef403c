package redis

import goredis "github.com/redis/go-redis/v9"

// As answers (*distlock.Locker).As: a *goredis.UniversalClient target gets
// the Locker's client.
func (d *driver) As(target any) bool {
	if t, ok := target.(**driver); ok { // for this package's tests
		*t = d
		return true
	}
	if t, ok := target.(*goredis.UniversalClient); ok {
		*t = d.client
		return true
	}
	return false
}
