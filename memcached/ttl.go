package memcached

import (
	"fmt"
	"time"

	"github.com/distlock/distlock/backend"
)

// MinTTL is the shortest TTL the backend accepts. memcached counts expiry
// in whole seconds on a clock that ticks once a second, so a lock can vanish
// up to a second before its TTL: 2 s is the least that leaves a positive
// validity (see ExpiryGranularity).
const MinTTL = 2 * time.Second

// MaxTTL is the longest TTL the backend accepts: 30 days (2,592,000 s).
// memcached reads a larger expiry as an absolute Unix time, so 30 days and
// one second would expire at once; distlock refuses it (ErrInvalidTTL)
// rather than convert it with a client clock the server does not share.
const MaxTTL = 30 * 24 * time.Hour

// maxRelative is MaxTTL in seconds, the largest relative memcached expiry.
const maxRelative = int64(MaxTTL / time.Second)

// ExpiryGranularity is memcached's expiry resolution, one tick of its
// clock. Its clock ticks once a second and can jump by two, so an item
// stored with expiry n lives between n−2 and n seconds. Every expiry sent
// to memcached is the TTL plus this one tick, and a lease's local validity
// is its TTL less this much: a lock lives between ttl − 1s (at a jump) and
// ttl + 1s, and normally more than ttl. docs/backends/memcached.md has the
// measurements.
const ExpiryGranularity = time.Second

// Validity implements backend.TTLPolicy: TTLs are whole seconds from MinTTL
// to MaxTTL, and the lock is certainly held for ttl less one second.
func (d *driver) Validity(ttl time.Duration) (time.Duration, error) { return validity(ttl) }

func validity(ttl time.Duration) (time.Duration, error) {
	switch {
	case ttl < MinTTL:
		return 0, fmt.Errorf("%w: %v is below memcached's minimum of %v (expiry counts whole seconds on a 1-second clock)", backend.ErrInvalidTTL, ttl, MinTTL)
	case ttl%time.Second != 0:
		return 0, fmt.Errorf("%w: %v is not a whole number of seconds (memcached expiry is in seconds; distlock does not round)", backend.ErrInvalidTTL, ttl)
	case ttl > MaxTTL:
		return 0, fmt.Errorf("%w: %v exceeds memcached's 30-day limit for relative expiry (%v)", backend.ErrInvalidTTL, ttl, MaxTTL)
	}
	// The item lives at least its expiry less two ticks; the expiry is
	// ttl + 1s except at MaxTTL, where the padding does not fit.
	served := time.Duration(ttlSeconds(ttl))*time.Second - 2*ExpiryGranularity
	return min(ttl-ExpiryGranularity, served), nil
}

// ttlSeconds is the memcached expiry for a new item with ttl: ttl plus one
// tick (ExpiryGranularity), at most 30 days.
func ttlSeconds(ttl time.Duration) int32 {
	return int32(min(int64(ttl/time.Second)+1, maxRelative))
}

// expSeconds is the memcached expiry for an item that must be held until
// expMs (Unix ms) seen at nowMs: the remaining time rounded up, plus one
// tick, at least 1 and at most 30 days (a larger number would be read as an
// absolute time).
func expSeconds(expMs, nowMs int64) int32 {
	s := (expMs-nowMs+999)/1000 + 1
	return int32(min(max(s, 1), maxRelative))
}

// holdSeconds is the memcached expiry for an item that must not vanish
// before untilMs seen at nowMs even if memcached's clock jumps meanwhile
// (ExpiryGranularity): expSeconds plus one more tick. A lease needs no
// second tick, since its validity is counted one tick short of its TTL; a
// minimum hold has no such margin.
func holdSeconds(untilMs, nowMs int64) int32 {
	return int32(min(int64(expSeconds(untilMs, nowMs))+1, maxRelative))
}
