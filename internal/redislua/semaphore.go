package redislua

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/async"
)

// SemKeys names the server-side objects of one semaphore, all in the
// Cluster slot of the lock of the same name (its hash tag), beside and
// apart from that lock's: the holders' sorted set (member: permit id,
// score: expiry in server ms), the permit count, the holders' tokens, the
// slot's fencing counter (shared with the slot's locks, so tokens are
// strictly increasing per semaphore as per lock) and the wake-up channel.
type SemKeys struct {
	Set, Count, Tokens, Fence, Channel string
}

// SemKeysFor returns the names of the semaphore key under prefix.
func SemKeysFor(prefix, key string) SemKeys {
	k := KeysFor(prefix, key)
	return SemKeys{Set: k.Lock + ":sem", Count: k.Lock + ":semn", Tokens: k.Lock + ":semt", Fence: k.Fence, Channel: k.Lock + ":semwake"}
}

var (
	semAcquireScript = goredis.NewScript(Compose("fence.lua", "sem_lib.lua", "sem_acquire.lua"))
	semReleaseScript = goredis.NewScript(Compose("sem_lib.lua", "sem_release.lua"))
	semRefreshScript = goredis.NewScript(Compose("sem_lib.lua", "sem_refresh.lua"))
)

// SemResult is what SemAcquire found.
type SemResult struct {
	// Granted: the permit is held with Token.
	Granted bool
	Token   uint64
	// PTTL, when not granted, is the time until the first holder
	// expires.
	PTTL time.Duration
	// Have, when not 0, is the count the semaphore is held with, which
	// differs from the one asked for: nothing was taken.
	Have int
}

// SemAcquire takes one of permits permits of the semaphore for permit id
// (from a HoldSource), in one script: expired holders are dropped, the
// count is checked against the holders', and a permit is added with the
// next fencing token and expiry ttl if fewer than permits are held. A
// retry with the same id returns the same grant.
func SemAcquire(ctx context.Context, c goredis.Scripter, k SemKeys, id string, ttl time.Duration, permits int) (SemResult, error) {
	px, err := PX(ttl)
	if err != nil {
		return SemResult{}, err
	}
	if err := checkHold(id); err != nil {
		return SemResult{}, err
	}
	v, err := semAcquireScript.Run(ctx, c, []string{k.Set, k.Count, k.Tokens, k.Fence}, id, px, permits).Int64Slice()
	if err != nil {
		return SemResult{}, err
	}
	if len(v) != 2 {
		return SemResult{}, fmt.Errorf("redislua: unexpected semaphore acquire reply %v", v)
	}
	switch v[0] {
	case 1:
		if v[1] < 0 {
			return SemResult{}, fmt.Errorf("redislua: negative token %d", v[1])
		}
		return SemResult{Granted: true, Token: uint64(v[1])}, nil
	case 0:
		return SemResult{PTTL: time.Duration(v[1]) * time.Millisecond}, nil
	case -1:
		return SemResult{Have: int(v[1])}, nil
	}
	return SemResult{}, fmt.Errorf("redislua: unexpected semaphore acquire reply %v", v)
}

// SemRelease gives permit id back and publishes on k.Channel, if it is held
// and unexpired (or, with expired, held at all: the undo of an acquire
// whose reply was lost). It reports whether it gave a permit back.
func SemRelease(ctx context.Context, c goredis.Scripter, k SemKeys, id string, expired bool) (bool, error) {
	flag := "0"
	if expired {
		flag = "1"
	}
	n, err := semReleaseScript.Run(ctx, c, []string{k.Set, k.Count, k.Tokens}, id, k.Channel, flag).Int64()
	return n == 1, err
}

// SemRefresh extends permit id to at least ttl from now if it is held and
// unexpired, and reports whether it was.
func SemRefresh(ctx context.Context, c goredis.Scripter, k SemKeys, id string, ttl time.Duration) (bool, error) {
	px, err := PX(ttl)
	if err != nil {
		return false, err
	}
	n, err := semRefreshScript.Run(ctx, c, []string{k.Set, k.Count, k.Tokens}, id, px).Int64()
	return n == 1, err
}

// UndoPermit gives back, in the background, the permit id that an acquire
// whose outcome is unknown may have taken: on UndoAcquire's schedule (its
// request may still be on its way), until a try gives it back, within
// min(within, UndoTimeout). child as for Go.
func (u *Undoer) UndoPermit(c goredis.Scripter, k SemKeys, id string, within time.Duration, child bool) {
	u.Go(func() {
		u.onScheduleDo(within, func(ctx context.Context) (bool, error) { return SemRelease(ctx, c, k, id, true) })
	}, child)
}

// onScheduleDo runs try at each offset of undoAcquireSchedule until one
// reports done, within min(within, UndoTimeout), as onSchedule does for a
// lock's hold (onSchedule could be written over it).
func (u *Undoer) onScheduleDo(within time.Duration, try func(ctx context.Context) (bool, error)) {
	async.Retry{Schedule: undoAcquireSchedule, Within: min(within, UndoTimeout), TryTimeout: 500 * time.Millisecond}.Do(context.Background(), func(ctx context.Context) bool {
		done, err := try(ctx)
		if err != nil && u.g.Closing() {
			return true
		}
		return (err == nil && done) || errors.Is(err, goredis.ErrClosed)
	})
}
