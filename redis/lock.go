package redis

import (
	"context"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
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
	var (
		r         redislua.ReleaseResult
		abandoned bool
		err       error
	)
	if ctx.Done() == nil {
		r, err = redislua.Release(ctx, d.client, l.keys, l.owner, l.token, l.hold) // no closures to build
	} else {
		r, abandoned, err = async.Call(d.bg.Group(), ctx, func(ctx context.Context) (redislua.ReleaseResult, error) {
			return redislua.Release(ctx, d.client, l.keys, l.owner, l.token, l.hold)
		}, func(_ redislua.ReleaseResult, err error) {
			if redislua.Ambiguous(err) {
				d.bg.Undo(d.client, l.keys, l.owner, l.token, l.hold, redislua.UndoTimeout, true)
			}
		})
	}
	if err != nil {
		if redislua.Ambiguous(err) && !abandoned {
			// It may not have run: finish it in the background so the
			// lock does not stay held until its TTL.
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
	d := l.d
	var (
		held bool
		err  error
	)
	if ctx.Done() == nil {
		held, err = redislua.Refresh(ctx, d.client, l.keys, l.owner, l.token, l.hold, ttl) // no closure to build
	} else {
		held, _, err = async.Call(d.bg.Group(), ctx, func(ctx context.Context) (bool, error) {
			return redislua.Refresh(ctx, d.client, l.keys, l.owner, l.token, l.hold, ttl)
		}, nil)
	}
	if err != nil {
		return redislua.OpError(ctx, err)
	}
	if !held {
		return errNotHeld
	}
	return nil
}
