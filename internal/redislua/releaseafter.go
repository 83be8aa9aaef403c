package redislua

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// ReleaseAfter releases one hold, owner-checked like Release, but keeps the
// lock taken by its owner until d from now by the server's clock (a
// minimum hold): with no other hold left the lock expires exactly then,
// even if its TTL ran longer; with others its expiry is never shortened,
// and the last one's Release leaves the lock until that moment instead of
// deleting it. The lock is not free, but when its expiry comes sooner than
// before, the wake-up is published on k.Channel for a marked lock (as by a
// freeing Release), so that waiters asleep until the old expiry learn the
// new one. It reports
// whether the hold was there (false: nothing changed). For a fair lock the
// queue is left alone: waiters take the lock when it expires, as after a
// holder that crashed.
func ReleaseAfter(ctx context.Context, c goredis.Scripter, k Keys, owner string, token uint64, hold string, d time.Duration) (bool, error) {
	px, err := PX(d)
	if err != nil {
		return false, err
	}
	if err := checkHold(hold); err != nil {
		return false, err
	}
	channel := k.Channel
	if k.Queue != "" {
		channel = "" // a fair lock's channel carries grants: its waiters take the lock at expiry
	}
	n, err := releaseAfterScript.Run(ctx, c, []string{k.Lock}, owner, token, hold, px, channel).Int64()
	if err != nil {
		return false, err
	}
	switch n {
	case 0:
		return false, nil
	case 1, 2:
		return true, nil
	}
	return false, fmt.Errorf("redislua: unexpected release-after reply %d", n)
}
