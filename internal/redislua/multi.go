package redislua

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

var acquireAllScript = goredis.NewScript(Compose("fence.lua", "acquire_all.lua"))

// AllAttempt is one lock of AcquireAll.
type AllAttempt struct {
	Keys                  Keys
	Owner, Hold, Metadata string
}

// AllResult is what AcquireAll found.
type AllResult struct {
	// Tokens, when every lock was taken, one per attempt in order.
	Tokens []uint64
	// Busy, when nothing was taken, is the index of a held lock and PTTL
	// its remaining time.
	Busy int
	PTTL time.Duration
}

// AcquireAll takes the free locks of all at once, all or nothing, in one
// script (every key on one node: on Redis Cluster, in one slot), each with
// its slot's next fencing token and expiry ttl, as Acquire takes one free
// lock. A lock held by anyone — its owner included — makes it take
// nothing; that lock is marked for its release to publish the wake-up, as
// a busy Acquire marks it (see Watch).
// Holds must come from a HoldSource.
func AcquireAll(ctx context.Context, c goredis.Scripter, all []AllAttempt, ttl time.Duration) (AllResult, error) {
	px, err := PX(ttl)
	if err != nil {
		return AllResult{}, err
	}
	keys := make([]string, 0, 3*len(all))
	args := make([]any, 0, 1+4*len(all))
	args = append(args, px)
	for _, a := range all {
		if err := checkHold(a.Hold); err != nil {
			return AllResult{}, err
		}
		if a.Keys.Fence == "" || a.Keys.Queue != "" {
			return AllResult{}, fmt.Errorf("redislua: AcquireAll needs plain fenced keys")
		}
		keys = append(keys, a.Keys.Lock, a.Keys.Fence, a.Keys.Legacy)
		args = append(args, a.Owner, a.Hold, a.Keys.Name, a.Metadata)
	}
	v, err := acquireAllScript.Run(ctx, c, keys, args...).Int64Slice()
	if err != nil {
		return AllResult{}, err
	}
	switch {
	case len(v) == 3 && v[0] == 0 && v[1] >= 1 && int(v[1]) <= len(all):
		return AllResult{Busy: int(v[1]) - 1, PTTL: time.Duration(max(v[2], 0)) * time.Millisecond}, nil
	case len(v) == 1+len(all) && v[0] == 1:
		r := AllResult{Tokens: make([]uint64, len(all))}
		for i, t := range v[1:] {
			if t <= 0 {
				return AllResult{}, fmt.Errorf("redislua: unexpected token %d", t)
			}
			r.Tokens[i] = uint64(t)
		}
		return r, nil
	}
	return AllResult{}, fmt.Errorf("redislua: unexpected acquire-all reply %v", v)
}
