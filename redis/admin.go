package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/redislua"
)

// The operator calls (Locker.Inspect, Locker.ForceRelease): one script
// each, atomic on the server.

var (
	_ backend.Inspector     = (*driver)(nil)
	_ backend.ForceReleaser = (*driver)(nil)
)

// Inspect implements backend.Inspector: the lock hash, its PTTL (the
// server's clock) and, in fair mode, the number of live waiters in the
// queue, read by one script that changes nothing but the mark that makes
// the holder's release publish its wake-up (Observe looks after it
// subscribed; see redislua.Inspect).
func (d *driver) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	return d.admin(ctx, key, redislua.Inspect)
}

// ForceRelease implements backend.ForceReleaser: one script deletes the
// lock whatever its owner and returns what it held, then hands the lock on
// as a release that frees it would (the first live waiter of a fair queue
// gets it, or else the wake-up is published). The fencing counter keeps
// counting, so the next token is higher than the evicted one.
func (d *driver) ForceRelease(ctx context.Context, key string, want backend.Holder) (backend.LockInfo, error) {
	return d.admin(ctx, key, func(ctx context.Context, c goredis.Scripter, k redislua.Keys) (redislua.LockState, error) {
		return redislua.ForceRelease(ctx, c, k, want)
	})
}

// admin runs op on key's lock, returning when ctx ends (the round trip
// then finishes in the background).
func (d *driver) admin(ctx context.Context, key string, op func(context.Context, goredis.Scripter, redislua.Keys) (redislua.LockState, error)) (backend.LockInfo, error) {
	if d.closed.Load() {
		return backend.LockInfo{}, backend.ErrClosed
	}
	k := d.keys(key)
	run := withTryAgain(d.cluster, func(ctx context.Context) (redislua.LockState, error) {
		return op(ctx, d.client, k)
	})
	var (
		s   redislua.LockState
		err error
	)
	if ctx.Done() == nil {
		s, err = run(ctx)
	} else {
		s, _, err = async.Call(d.bg.Group(), ctx, run, nil)
	}
	if err != nil {
		return backend.LockInfo{}, redislua.OpError(ctx, err)
	}
	return lockInfo(key, s), nil
}

// lockInfo is s as backend.LockInfo.
func lockInfo(key string, s redislua.LockState) backend.LockInfo {
	info := backend.LockInfo{Key: key, Waiters: s.Waiters}
	if s.Held {
		info.Held, info.Owner, info.Metadata, info.Token = true, s.Owner, s.Metadata, s.Token
		info.Holds, info.TTL = len(s.Holds), s.PTTL
	}
	return info
}
