package distlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/distlock/distlock/backend"
)

// LockInfo is what a backend can tell of one lock at one moment: holder,
// metadata, fencing token, holds, server-side TTL and waiters; see
// backend.LockInfo for each field.
type LockInfo = backend.LockInfo

// Inspect reads the lock named key without taking it or changing anything
// in the backend, for operators and monitoring: whether it is held, by
// which owner, with which metadata (WithMetadata) and fencing token, how
// many nested holds, how long the server keeps it yet, and how many
// acquisitions wait where the backend knows. A key that is not locked gives
// Held false and no error.
//
// On a backend that cannot inspect locks the error wraps
// errors.ErrUnsupported; other errors are classified as Acquire's are (ErrInvalidKey, ErrUnavailable, ErrClosed, ctx errors).
// The answer is a snapshot: the lock may change hands as soon as it is
// read.
func (l *Locker) Inspect(ctx context.Context, key string) (LockInfo, error) {
	return l.admin(ctx, "inspect", key, l.drv.Inspect)
}

// ForceOption configures ForceRelease.
type ForceOption func(*backend.Holder)

// IfHeldBy makes ForceRelease free the lock only if owner holds it now,
// and, when token is not 0 and the backend claims Fencing, with that token:
// the holder an operator saw with Inspect, compared atomically with the
// eviction. Held by another holder, or free, the lock is left as it is and
// the error wraps ErrNotHeld.
func IfHeldBy(owner string, token uint64) ForceOption {
	return func(h *backend.Holder) { h.Owner, h.Token = owner, token }
}

// ForceRelease frees the lock named key whatever its owner (or only if the
// holder is the one IfHeldBy names), for an operator whose holder is stuck,
// and returns what it evicted (Held false when the lock was free; nothing
// changed then). When it returns without error, the lock was free at that
// moment (a queued waiter may take it at once), the next acquisition of key
// gets a fencing token greater than the evicted holder's, so a fenced
// resource refuses the old holder's writes, and the old holder's lease
// ends with ErrLockLost at its next refresh or release (at once where the
// backend tells its session). The old holder's work under the lock is not
// stopped by anything but its lease's Context: prefer waiting out its TTL
// when it may still be writing unfenced.
//
// It is logged at Warn on the Locker's WithLogger logger, if it has one.
// Errors are shaped as Inspect's; on a backend that cannot force a release
// the error wraps errors.ErrUnsupported.
func (l *Locker) ForceRelease(ctx context.Context, key string, opts ...ForceOption) (LockInfo, error) {
	var want backend.Holder
	for _, o := range opts {
		if o != nil {
			o(&want)
		}
	}
	if want.Owner == "" && want.Token != 0 {
		return LockInfo{}, &Error{Op: "force-release", Key: key, Backend: "distlock", Err: fmt.Errorf("%w: IfHeldBy with a token needs the owner", ErrInvalidOption)}
	}
	if !l.caps.Fencing {
		want.Token = 0
	}
	info, err := l.admin(ctx, "force-release", key, func(ctx context.Context, key string) (LockInfo, error) {
		return l.drv.ForceRelease(ctx, key, want)
	})
	if err == nil {
		l.logForced(info)
	}
	return info, err
}

// admin runs one operator call on l's driver, found by pick: key checked,
// the Locker open, the driver's error classified and wrapped once.
func (b *Locker) admin(ctx context.Context, op, key string, call func(context.Context, string) (LockInfo, error)) (LockInfo, error) {
	if err := ValidateKey(key); err != nil {
		return LockInfo{}, b.err(op, key, err)
	}
	if err := b.begin(); err != nil {
		return LockInfo{}, b.err(op, key, err)
	}
	defer b.inflight.Done()
	cctx, stop := b.closeAware(ctx)
	defer stop()
	info, err := call(cctx, key)
	if err != nil {
		err = b.classify(err)
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w: %w", err, cerr)
		} else if cerr == nil && b.isClosed() {
			err = ErrClosed
		}
		return LockInfo{}, b.err(op, key, err)
	}
	info.Key = key
	return info, nil
}

// logForced logs a forced release at Warn on the Locker's default logger.
func (l *Locker) logForced(info LockInfo) {
	s := defaultSettings()
	for _, o := range l.defaults {
		o(&s)
	}
	if s.watching == nil || s.watching.logger == nil {
		return
	}
	s.watching.logger.Warn("distlock: lock released by force", "backend", l.name, "key", info.Key,
		"held", info.Held, "owner", info.Owner, "metadata", info.Metadata, "token", info.Token)
}
