package backend

import (
	"context"
	"fmt"
	"time"
)

// MaxMetadataLen is the longest metadata string (Request.Metadata) a lock
// carries, in bytes.
const MaxMetadataLen = 1024

// LockInfo is what a backend can tell of one lock at one moment. Fields a
// backend cannot know stay at their zero value, except Waiters (-1).
type LockInfo struct {
	// Key is the lock's name as the caller gave it.
	Key string
	// Held reports whether an owner holds the lock now.
	Held bool
	// Owner is the holder's owner id (WithOwner, or the random id of an
	// acquisition without it); "" when not held.
	Owner string
	// Metadata is the holder's WithMetadata string, "" when none.
	Metadata string
	// Token is the holder's fencing token; 0 when not held or where the
	// backend does not claim Fencing.
	Token uint64
	// Holds is the holder's number of nested (reentrant) holds; 0 when not
	// held.
	Holds int
	// TTL is the time left before the server frees the lock unless it is
	// refreshed, as the server's clock counts it; 0 when not held or when
	// the lock is SessionBound and does not expire.
	TTL time.Duration
	// SessionBound: the lock lasts as long as its holder's session or
	// connection, not a TTL.
	SessionBound bool
	// Waiters is the number of acquisitions queued for the lock where the
	// backend keeps a queue it can count cheaply (ZooKeeper children, a
	// fair queue, blocked SQL sessions); -1 where it cannot tell.
	Waiters int
}

// Inspector is the part of Driver that reads a lock without taking it.
// Inspect returns the lock's state; a key that is not locked gives Held
// false and no error. It honours ctx and changes nothing in the backend.
type Inspector interface {
	Inspect(ctx context.Context, key string) (LockInfo, error)
}

// Holder names one hold of a lock, for a conditional ForceRelease: the
// owner id and, where the driver claims Fencing, the token (0: any).
// The zero Holder matches whoever holds the lock.
type Holder struct {
	Owner string
	Token uint64
}

// ForceReleaser is the part of Driver that frees a lock whatever its
// owner, for operators. ForceRelease frees every hold of the lock and
// returns what it evicted (Held false when the lock was free: nothing
// changed then). With a non-zero want it frees the lock only if want holds
// it now (owner, and token when want.Token is not 0), compared atomically
// with the eviction; held by another holder or free, it changes nothing and
// returns an error wrapping ErrNotHeld. When it returns nil error:
//   - the lock is free at that moment, and the next acquisition of the key
//     (a queued waiter may take it at once) gets a fencing token greater
//     than the evicted holder's, where the driver claims Fencing;
//   - the evicted holder's Refresh and Release return ErrNotHeld, so its
//     lease ends at its next refresh (a session-bound driver may also end
//     it at once through Request.Lost).
//
// It honours ctx; an error leaves the lock either intact or freed, never
// with a token that could repeat.
type ForceReleaser interface {
	ForceRelease(ctx context.Context, key string, want Holder) (LockInfo, error)
}

// Matches reports whether info shows the hold that h names; the zero
// Holder matches whatever info shows.
func (h Holder) Matches(info LockInfo) bool {
	if h == (Holder{}) {
		return true
	}
	return info.Held && info.Owner == h.Owner && (h.Token == 0 || info.Token == h.Token)
}

// Refusal is the error of a ForceRelease whose named holder does not hold
// the lock: it wraps ErrNotHeld.
func (h Holder) Refusal() error {
	if h.Token == 0 {
		return fmt.Errorf("%w: not held by %s now", ErrNotHeld, h.Owner)
	}
	return fmt.Errorf("%w: not held by %s with token %d now", ErrNotHeld, h.Owner, h.Token)
}
