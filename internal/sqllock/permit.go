package sqllock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock/backend"
)

// TryAcquire takes one of permits permits of req.Key in one transaction
// (PermitTx): the semaphore's own row locked, its expired permits deleted,
// the live ones counted; then a refusal (admit) that keeps the deletion,
// or a new permit whose token is the semaphore's raised fence. When the
// outcome is unknown (no answer) the permit it may have taken is given back
// in the background (Base.Undo).
func (p *Permits) TryAcquire(ctx context.Context, req backend.Request, permits int) (backend.Lock, error) {
	if err := p.open(ctx); err != nil {
		return nil, err
	}
	key := p.sql.Key(req.Key)
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	token, err := p.grant(ctx, key, id, permits, TTLMicros(req.TTL))
	if err != nil {
		if refused(err, req.Key) {
			return nil, err
		}
		if !p.sql.Rejected(err) {
			p.base.Undo(req.TTL, func(ctx context.Context) (bool, error) { return p.sql.Abandon(ctx, key, id) })
		}
		return nil, p.sql.Failed(ctx, err)
	}
	return &Permit{p: p, key: key, id: id, token: token}, nil
}

// grant runs the acquisition's transaction.
func (p *Permits) grant(ctx context.Context, key, id []byte, permits int, ttlUS int64) (uint64, error) {
	tx, err := p.sql.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	have, live, firstUS, err := tx.Count(ctx, key, permits)
	if err != nil {
		return 0, err
	}
	if err := admit(live, have, permits, firstUS); err != nil {
		if cerr := tx.Commit(ctx); cerr != nil { // keep the expired permits' deletion
			return 0, cerr
		}
		return 0, err
	}
	fence, err := tx.Grant(ctx, key, id, permits, ttlUS)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return fence, nil
}

// admit decides an acquisition of one of want permits, made while the
// semaphore's own row is locked: live permits are held now, with the count
// have, the first of them expiring in firstUS µs. nil: grant a permit.
func admit(live int64, have, want int, firstUS int64) error {
	switch {
	case live > 0 && have != want:
		return &backend.PermitsError{Have: have, Want: want}
	case live >= int64(want):
		return backend.Busy(time.Duration(firstUS) * time.Microsecond)
	}
	return nil
}

// refused reports whether err, from an acquisition of a permit of key, is
// an answer that took nothing (admit's: another count, which it then names
// key in, or every permit held), to be returned as it is.
func refused(err error, key string) bool {
	var pe *backend.PermitsError
	if errors.As(err, &pe) {
		pe.Key = key
		return true
	}
	return errors.Is(err, backend.ErrNotAcquired)
}

// errPermitNotHeld is the error of Refresh and Release of a permit that has
// expired or was given back.
var errPermitNotHeld = fmt.Errorf("%w: the permit has expired or was given back", backend.ErrNotHeld)

// Permit is one held permit: a backend.Lock.
type Permit struct {
	p       *Permits
	key, id []byte
	token   uint64
}

// Token is the permit's fencing token.
func (l *Permit) Token() uint64 { return l.token }

// Refresh extends the permit to at least ttl from now by the database
// clock, if it has not expired (else ErrNotHeld).
func (l *Permit) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := CheckTTL(ttl); err != nil {
		return err
	}
	held, err := l.p.sql.Refresh(ctx, l.key, l.id, TTLMicros(ttl))
	return l.outcome(ctx, held, err)
}

// Release gives the permit back, if it has not expired (else ErrNotHeld).
func (l *Permit) Release(ctx context.Context) error {
	held, err := l.p.sql.Release(ctx, l.key, l.id)
	return l.outcome(ctx, held, err)
}

// outcome is the error of a statement on a held permit: the driver's, or
// ErrNotHeld when it matched no permit.
func (l *Permit) outcome(ctx context.Context, held bool, err error) error {
	switch {
	case err != nil:
		return l.p.sql.Failed(ctx, err)
	case !held:
		return errPermitNotHeld
	}
	return nil
}
