package distlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock/backend"
)

// Lease is one held lock. Its methods are safe for concurrent use.
//
// A Lease is held from the moment Acquire or TryAcquire returns it until
// Release, Close of its Locker, or loss: expiry of its local validity
// deadline without a successful refresh, a refresh the backend refuses, or
// the end of the backend session. Then Done is closed, Context is cancelled
// and Err says why. Loss is reported no later than another owner can
// acquire the lock, provided the backend honours the TTL it was given and
// clocks drift by less than the backend's allowance: the deadline is measured
// on the monotonic clock from the moment the acquire or refresh request was
// sent, not from its reply.
type Lease struct {
	l     *Locker
	key   string
	owner string
	lock  backend.Lock
	token uint64

	// minHoldEnd is when the minimum hold (WithMinHold) ends, as an
	// offset from epoch on the monotonic clock (8 bytes, where a time.Time
	// takes 24); 0: none. Set by start.
	minHoldEnd time.Duration

	mu     sync.Mutex
	state  leaseState
	auto   bool // packed beside state
	err    error
	done   chan struct{}           // made on demand
	ctx    context.Context         // made on demand
	cancel context.CancelCauseFunc // with ctx

	slot slot   // the lease's place in its Locker's scheduler
	w    *watch // its Observer and logger; nil when it has none
}

type leaseState uint8

const (
	pending leaseState = iota
	held
	ending // ended, its Observer being told; Done and Context not yet closed
	ended
)

var (
	errReleased       = fmt.Errorf("%w: released", ErrNotHeld)
	errExpired        = fmt.Errorf("%w: validity deadline passed without a successful refresh", ErrLockLost)
	errSessionExpired = fmt.Errorf("%w: no contact with the backend within the session timeout", ErrLockLost)
	errLate           = fmt.Errorf("%w: the grant arrived after its validity had ended (backend or network slower than the TTL)", ErrUnavailable)
	closedLease       = fmt.Errorf("%w: %w", ErrNotHeld, ErrClosed)
)

func newLease(l *Locker, r *request) *Lease {
	return &Lease{l: l, key: r.key, owner: r.owner, auto: r.autoRefresh, slot: slot{ttl: r.ttl, validity: r.validity, idx: -1},
		w: newWatch(r, l.name)}
}

// Key returns the lock's name.
func (ls *Lease) Key() string { return ls.key }

// Owner returns the holder identity: the WithOwner id, or the random id
// made for this acquisition.
func (ls *Lease) Owner() string { return ls.owner }

// Token returns the fencing token: strictly increasing per key for every
// new acquisition, across owners, processes, expiries and takeovers, where
// Capabilities().Fencing is true; a reentrant acquisition returns the
// holder's token. It is 0 on backends without Fencing. Pass it to the
// resource you protect and have it reject writes with a token lower than one
// it has seen: that, not the lock alone, makes a paused or partitioned
// holder harmless.
func (ls *Lease) Token() uint64 { return ls.token }

// Deadline returns the local validity deadline: until then the lock is
// certainly held (if the lease has not ended). From the deadline on, Err,
// Done and Context report the lease lost, whatever the refresh scheduler is
// doing. On session-bound backends
// whose locks do not expire it is the driver's session deadline (last
// contact plus the session timeout, less a margin), or zero if the driver
// keeps none.
func (ls *Lease) Deadline() time.Time {
	if !ls.l.caps.Expiring {
		if d, ok := ls.lock.(backend.Deadliner); ok {
			return d.ValidUntil()
		}
		return time.Time{}
	}
	ls.l.sched.mu.Lock()
	defer ls.l.sched.mu.Unlock()
	return ls.slot.deadline
}

// checkDeadline ends the lease at once if its validity deadline has
// passed, so that a caller who looks right after a pause (SIGSTOP, a long GC
// pause, a suspended VM) sees the loss even before the scheduler goroutine
// has run.
func (ls *Lease) checkDeadline() {
	if !ls.l.caps.Expiring {
		ls.checkSession()
		return
	}
	s := &ls.l.sched
	s.mu.Lock()
	// Whether or not the scheduler has it on its heap: a lease it has taken
	// off to end (its deadline passed) must not look held until its turn.
	var why error
	if now := time.Now(); !ls.slot.deadline.IsZero() && !now.Before(ls.slot.deadline) {
		why = s.expiredLocked(ls, now)
	}
	s.mu.Unlock()
	if why != nil {
		ls.end(why, endLost)
	}
}

// checkSession ends a session-bound lease whose driver-kept deadline has
// passed (backend.Deadliner).
func (ls *Lease) checkSession() {
	ls.mu.Lock()
	d, ok := ls.lock.(backend.Deadliner)
	held := ls.state == held
	ls.mu.Unlock()
	if !ok || !held {
		return
	}
	if until := d.ValidUntil(); !until.IsZero() && !time.Now().Before(until) {
		ls.end(errSessionExpired, endLost)
	}
}

// Done returns a channel closed when the lease ends: released, expired,
// session lost, taken over, or its Locker closed.
func (ls *Lease) Done() <-chan struct{} {
	ls.checkDeadline()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.done == nil {
		ls.done = make(chan struct{})
		if ls.state == ended {
			close(ls.done)
		}
	}
	return ls.done
}

// Err returns nil while the lease is held. After it ended, Err is an
// *Error naming the lease's key (Op "lease") that wraps ErrNotHeld; it also
// wraps ErrLockLost if the lease ended without Release, and ErrClosed if
// its Locker was closed.
func (ls *Lease) Err() error {
	ls.checkDeadline()
	ls.mu.Lock()
	err := ls.err
	ls.mu.Unlock()
	if err == nil {
		return nil
	}
	return ls.l.err("lease", ls.key, err)
}

// Context returns a context cancelled when the lease ends, with Err as its
// cause (context.Cause), so work done under the lock can stop when the lock
// is lost.
func (ls *Lease) Context() context.Context {
	ls.checkDeadline()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.ctx == nil {
		ls.ctx, ls.cancel = context.WithCancelCause(context.Background())
		if ls.state == ended {
			ls.cancel(ls.err)
		}
	}
	return ls.ctx
}

// start makes a granted lease held, its minimum hold (if minHold > 0)
// counted from now. It reports false if the lease was lost before or its
// Locker closed; the caller then gives the lock back.
func (ls *Lease) start(lock backend.Lock, sent time.Time, minHold time.Duration) bool {
	ls.mu.Lock()
	if ls.state != pending {
		ls.mu.Unlock()
		return false
	}
	ls.lock, ls.token, ls.state = lock, lock.Token(), held
	if minHold > 0 {
		// From now, not sent: after a native wait (backend.Blocker) sent
		// is the start of the wait, and the grant came at most now.
		ls.minHoldEnd = time.Since(epoch) + minHold
	}
	if ls.w != nil {
		ls.w.ev.Token, ls.w.sentAt = ls.token, sent
	}
	ls.mu.Unlock()
	if !ls.l.track(ls) {
		ls.end(closedLease, endQuiet)
		return false
	}
	if ls.slot.validity > 0 {
		if !ls.l.sched.add(ls, sent) {
			ls.end(errLate, endQuiet)
			return false
		}
	}
	return true
}

// endKind says how a lease ends, for end.
type endKind bool

const (
	endQuiet endKind = false // released, or a grant that never became held: no loss to report
	endLost  endKind = true  // lost, or closed with its Locker: its Observer and logger are told
)

// end is the lease's one transition to ended: once, with err, and it says
// whether it made it. It detaches the lease from its Locker's scheduler
// and lease set. With endLost, the lease's Observer and logger are told
// (without the lock) after Err reports err and before Done and Context
// are closed: whoever Done wakes sees what the Observer was told.
func (ls *Lease) end(err error, how endKind) bool {
	ls.mu.Lock()
	if ls.state == ended || ls.state == ending {
		ls.mu.Unlock()
		return false
	}
	ls.err = err
	if how == endLost && ls.w != nil {
		ls.state = ending
		ls.mu.Unlock()
		ls.w.ended(err)
		ls.mu.Lock()
	}
	ls.state = ended
	if ls.done != nil {
		close(ls.done)
	}
	if ls.cancel != nil {
		ls.cancel(err)
	}
	ls.mu.Unlock()
	ls.l.sched.remove(ls)
	ls.l.untrack(ls)
	return true
}

// backendLost is the Request.Lost callback given to drivers.
func (ls *Lease) backendLost(cause error) {
	if cause == nil {
		cause = errors.New("backend reported the lock lost")
	}
	cause = ls.l.classify(cause)
	if !errors.Is(cause, ErrLockLost) {
		cause = fmt.Errorf("%w: %w", ErrLockLost, cause)
	}
	ls.end(&marked{"session", cause}, endLost)
}

func (ls *Lease) endedError(op string) error {
	ls.mu.Lock()
	err := ls.err
	ls.mu.Unlock()
	if err == nil {
		err = ErrNotHeld
	}
	return ls.l.err(op, ls.key, err)
}

// Release gives up the lease. It is owner-checked in the backend: it never
// deletes a lock that another owner holds now. It returns an error wrapping
// ErrNotHeld if the lease was already released or lost (a second Release of
// the same lease changes nothing, even when the same owner holds the lock
// through another reentrant lease). If the backend cannot be reached the
// lease still ends locally: it is no longer refreshed and expires after its
// TTL, and the error wraps ErrUnavailable.
//
// With a ctx that is already done, Release still ends the lease locally,
// and the backend's lock may or may not be removed: whether the request
// leaves before the ctx check is the backend client's matter (mem://
// removes it at once). The error then wraps ctx.Err() even if the lock was
// removed; a lock that was not is freed at its TTL or with the session.
// To release after the work's context ended, pass
// context.WithoutCancel(ctx) with a timeout, as Do does.
//
// Before the minimum hold of WithMinHold has passed, Release ends the lease
// but leaves the lock taken until the minimum hold ends; see WithMinHold.
func (ls *Lease) Release(ctx context.Context) error { return ls.releaseKeeping(ctx, true) }

// abandon gives back a lease whose protected work never ran: Release, but
// the lock is freed at once, whatever minimum hold it has, since a minimum
// hold is kept only by a hold whose work ran. Every give-back distlock
// makes on its own goes through it: the rollback of an AcquireAll or
// TryAcquireAll that failed, a term whose Lead ended before fn began. (A
// lock that never became a held Lease is given back by releaseQuietly,
// which knows no minimum hold.)
func (ls *Lease) abandon(ctx context.Context) error { return ls.releaseKeeping(ctx, false) }

// Abandon gives the lease back as Release does, owner-checked, but frees
// the lock at once whatever minimum hold (WithMinHold) it was taken with:
// it is for a lease whose protected work never ran — the job decided not
// to run, or could not start — since a minimum hold is kept only by a hold
// whose work ran. ErrNotHeld as for Release.
func (ls *Lease) Abandon(ctx context.Context) error { return ls.abandon(ctx) }

// releaseKeeping ends the lease as released and frees its lock: within the
// minimum hold, only when the hold ends if keepMinHold.
func (ls *Lease) releaseKeeping(ctx context.Context, keepMinHold bool) error {
	ls.checkDeadline() // expired while nobody looked: report the loss, skip the round trip
	if !ls.end(errReleased, endQuiet) {
		return ls.endedError("release")
	}
	release := ls.release
	if left := ls.minHoldLeft(); left > 0 && keepMinHold {
		release = func(ctx context.Context) error { return ls.holdOut(ctx, left) }
	}
	if ls.w != nil && ls.w.obs != nil {
		return ls.observedRelease(ctx, release)
	}
	return release(ctx)
}

// detached runs release on a ctx that keeps ctx's values but not its end,
// bounded by releaseLimit: the release after work whose ctx may have ended
// (Do, TryDo, Lead): ls.Release, or ls.abandon when the work did not run.
func detached(ctx context.Context, release func(context.Context) error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseLimit())
	defer cancel()
	return release(rctx)
}

// releaseDetached is Release through detached.
func (ls *Lease) releaseDetached(ctx context.Context) error { return detached(ctx, ls.Release) }

func (ls *Lease) release(ctx context.Context) error {
	return ls.releaseErr(ls.lock.Release(ctx))
}

// releaseErr shapes the backend's answer to a release of a lease that was
// held until then: ErrNotHeld from the backend means the lock was lost
// without the lease knowing (expired early, released by force), so it is
// reported as ErrLockLost, as Do and TryDo promise.
func (ls *Lease) releaseErr(err error) error {
	if err == nil {
		return nil
	}
	err = ls.l.classify(err)
	if errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrLockLost) {
		err = fmt.Errorf("%w: the backend no longer held it: %w", ErrLockLost, err)
	}
	return ls.l.err("release", ls.key, err)
}

func (ls *Lease) observedRelease(ctx context.Context, release func(context.Context) error) error {
	e := ls.w.event()
	ctx = ls.w.obs.ReleaseStart(ctx, e)
	err := release(ctx)
	ls.w.obs.ReleaseEnd(ctx, e, err)
	return err
}

// refreshed tells the lease's Observer and logger how a refresh ended.
func (ls *Lease) refreshed(ttl time.Duration, auto bool, err error) {
	if ls.w != nil {
		ls.mu.Lock()
		h := ls.state == held
		ls.mu.Unlock()
		ls.w.refreshed(ttl, auto, err, h)
	}
}

// Refresh extends the lease to at least ttl from now, owner-checked: it
// returns an error wrapping ErrNotHeld (and ErrLockLost, ending the lease, if
// the backend no longer holds it for this owner). ttl becomes the lease's
// TTL for later automatic refreshes. On a transient failure (ErrUnavailable)
// the lease stays held until its validity deadline.
func (ls *Lease) Refresh(ctx context.Context, ttl time.Duration) error {
	validity, err := ls.l.validityFor(ttl)
	if err != nil {
		return ls.l.err("refresh", ls.key, err)
	}
	ls.mu.Lock()
	st := ls.state
	ls.mu.Unlock()
	if st != held {
		return ls.endedError("refresh")
	}
	sent := time.Now()
	if err := ls.l.classify(ls.lock.Refresh(ctx, ttl)); err != nil {
		ls.refreshed(ttl, false, err)
		if errors.Is(err, ErrNotHeld) {
			if ls.end(refused(err), endLost) {
				return ls.l.err("refresh", ls.key, ls.Err())
			}
			return ls.endedError("refresh")
		}
		return ls.l.err("refresh", ls.key, err)
	}
	if validity > 0 && !ls.l.sched.refreshed(ls, sent, ttl, validity, false) {
		// Ended meanwhile, or its deadline passed before the reply came.
		ls.end(errExpired, endLost)
		return ls.endedError("refresh")
	}
	ls.mu.Lock()
	st = ls.state
	ls.mu.Unlock()
	if st != held {
		return ls.endedError("refresh")
	}
	ls.refreshed(ttl, false, nil)
	return nil
}
