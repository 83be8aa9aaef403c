// Package redisurl range-checks the go-redis options that redis:// and
// redlock:// URLs set. go-redis's ParseURL converts numbers but checks no
// range, and some values panic later inside go-redis (pool_size=-5:
// "makechan: size out of range") or overflow (dial_timeout=99999999999,
// in seconds). Check turns each such value into an ErrInvalidOption.
package redisurl
