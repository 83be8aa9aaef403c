package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/redislua"
)

// Semaphores (Locker.Semaphore): a sorted set of the holders' permit
// ids scored by their expiry (server time), a count and the holders'
// tokens, all in the slot of the lock of the same name (redislua.SemKeys).
// One script per operation: acquire drops expired holders, checks the count
// against the holders' and adds a permit with the slot's next fencing
// token; release and refresh act on one permit id, only while it is
// unexpired. The keys expire with the last holder. A release publishes on
// the semaphore's channel, which waiters watch through the Locker's shared
// subscription (Watch with Request.Permits); a waiter never sleeps past the
// first holder's expiry. An acquire whose reply is lost is undone by its
// permit id on a schedule. Capabilities: Fencing, Notify, Expiring.

var _ backend.Permitter = (*driver)(nil)

// PermitCapabilities implements backend.Permitter: Fencing, Notify,
// Expiring.
func (d *driver) PermitCapabilities() (backend.Capabilities, error) {
	return backend.Capabilities{Fencing: true, Notify: true, Expiring: true}, nil
}

// tryAcquirePermit runs the acquire script once for one of req.Permits
// permits.
func (d *driver) tryAcquirePermit(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if d.closed.Load() {
		return nil, backend.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, async.CtxError(ctx)
	}
	k := redislua.SemKeysFor(d.prefix, req.Key)
	id := d.holds.Next()
	sent := time.Now()
	run := withTryAgain(d.cluster, func(ctx context.Context) (redislua.SemResult, error) {
		return redislua.SemAcquire(ctx, d.client, k, id, req.TTL, req.Permits)
	})
	var (
		r         redislua.SemResult
		abandoned bool
		err       error
	)
	if ctx.Done() == nil {
		r, err = run(ctx)
	} else {
		r, abandoned, err = async.Call(d.bg.Group(), ctx, run, func(_ redislua.SemResult, err error) {
			if err == nil || redislua.Ambiguous(err) {
				d.bg.UndoPermit(d.client, k, id, req.TTL, true)
			}
		})
	}
	switch {
	case err != nil:
		if redislua.Ambiguous(err) && !abandoned {
			d.bg.UndoPermit(d.client, k, id, req.TTL, false)
		}
		return nil, redislua.OpError(ctx, err)
	case r.Have != 0:
		return nil, &backend.PermitsError{Key: req.Key, Have: r.Have, Want: req.Permits}
	case !r.Granted:
		return nil, backend.Busy(r.PTTL)
	}
	return &permit{d: d, keys: k, id: id, token: r.Token, issued: sent}, nil
}

// watchPermits is Watch for the permits of req.Key's semaphore, over the
// Locker's shared subscription.
func (d *driver) watchPermits(ctx context.Context, req backend.Request) (<-chan struct{}, func()) {
	return d.sub.Watch(ctx, redislua.SemKeysFor(d.prefix, req.Key).Channel)
}

// permit is one held permit.
type permit struct {
	d      *driver
	keys   redislua.SemKeys
	id     string
	token  uint64
	issued time.Time
}

func (p *permit) Token() uint64 { return p.token }

// IssuedAt implements backend.Issued.
func (p *permit) IssuedAt() time.Time { return p.issued }

// Release gives the permit back if it is unexpired, returning when ctx
// ends (the script then finishes in the background).
func (p *permit) Release(ctx context.Context) error {
	err := p.call(ctx, func(ctx context.Context) (bool, error) {
		return redislua.SemRelease(ctx, p.d.client, p.keys, p.id, false)
	})
	if err != nil && !errors.Is(err, backend.ErrNotHeld) && redislua.Ambiguous(err) {
		// It may not have run: finish it in the background, so that the
		// permit does not stay taken until its TTL.
		p.d.bg.UndoPermit(p.d.client, p.keys, p.id, redislua.UndoTimeout, false)
	}
	return err
}

// Refresh extends the permit to at least ttl if it is unexpired.
func (p *permit) Refresh(ctx context.Context, ttl time.Duration) error {
	return p.call(ctx, func(ctx context.Context) (bool, error) {
		return redislua.SemRefresh(ctx, p.d.client, p.keys, p.id, ttl)
	})
}

func (p *permit) call(ctx context.Context, run func(context.Context) (bool, error)) error {
	run = withTryAgain(p.d.cluster, run)
	var (
		held bool
		err  error
	)
	if ctx.Done() == nil {
		held, err = run(ctx)
	} else {
		held, _, err = async.Call(p.d.bg.Group(), ctx, run, nil)
	}
	if err != nil {
		return redislua.OpError(ctx, err)
	}
	if !held {
		return errPermitNotHeld
	}
	return nil
}

var errPermitNotHeld = fmt.Errorf("%w: the permit expired or was given back", backend.ErrNotHeld)
