package redis

import (
	"context"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/redislua"
)

// lock is one hold granted by the driver.
type lock struct {
	d      *driver
	keys   redislua.Keys
	owner  string
	hold   string
	token  uint64
	issued time.Time // no later than the server started the TTL
}

var _ backend.Issued = (*lock)(nil)

func (l *lock) Token() uint64 { return l.token }

// IssuedAt implements backend.Issued.
func (l *lock) IssuedAt() time.Time { return l.issued }

// Release removes this hold, owner-checked, returning when ctx ends; a
// release whose outcome is unknown is finished in the background.
func (l *lock) Release(ctx context.Context) error {
	d := l.d
	var late func(redislua.ReleaseResult, error)
	if ctx.Done() != nil { // a ctx that never ends is never abandoned: no late callback to build
		late = func(_ redislua.ReleaseResult, err error) {
			if redislua.Ambiguous(err) {
				d.bg.Undo(d.client, l.keys, l.owner, l.token, l.hold, redislua.UndoTimeout, true)
			}
		}
	}
	r, abandoned, err := retryTryAgain(ctx, d.cluster, func() (redislua.ReleaseResult, bool, error) {
		return d.batch.Release(ctx, l.keys, l.owner, l.token, l.hold, late)
	})
	if err != nil {
		if (redislua.Ambiguous(err) || redislua.NotSent(err)) && !abandoned {
			// It may not have run (or was not sent: ctx ended while it
			// was queued): finish it in the background so the lock does
			// not stay held until its TTL.
			d.bg.Undo(d.client, l.keys, l.owner, l.token, l.hold, redislua.UndoTimeout, false)
		}
		return redislua.OpError(ctx, err)
	}
	if r == redislua.NotHeld {
		return errNotHeld
	}
	return nil
}

// Refresh extends this hold to at least ttl, owner-checked, returning when
// ctx ends.
func (l *lock) Refresh(ctx context.Context, ttl time.Duration) error {
	held, _, err := retryTryAgain(ctx, l.d.cluster, func() (bool, bool, error) {
		held, err := l.d.batch.Refresh(ctx, l.keys, l.owner, l.token, l.hold, ttl)
		return held, false, err
	})
	if err != nil {
		return redislua.OpError(ctx, err)
	}
	if !held {
		return errNotHeld
	}
	return l.d.confirmRefresh(ctx, l)
}
