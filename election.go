package distlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock/internal/async"
)

// Election is leadership of one key among candidates that share a backend,
// built on the lock: the candidate that holds the key's lock leads, for one
// Term per acquisition.
//
// Guarantees, on every backend:
//   - At no instant do two candidates both see Term.Err() == nil while
//     their leases are valid: a term ends (its Context is cancelled, Err
//     returns the cause) no later than the moment another candidate can
//     acquire the lock, because a Lease keeps a local validity deadline.
//     The one exception is an operator's ForceRelease: on backends that
//     cannot tell the holder at once (redis, redlock, memcached, the row
//     modes) the deposed leader learns of it at its next refresh, which
//     is what the fencing token is for.
//     A leader paused past its TTL (SIGSTOP, a long GC pause) sees its
//     term ended as soon as it runs again, before it acts, if it checks
//     Term.Err() first; its Context is cancelled at the same moment. A
//     pause that falls between a check that said nil and the action it
//     guards cannot be seen by any check: there only Token, checked by
//     the resource the leader writes, stops the deposed leader.
//   - Where Capabilities().Fencing, Term.Token() strictly increases with
//     every new term: pass it to the resources the leader writes, and they
//     can refuse a deposed leader that has not noticed yet. Where the
//     backend has no fencing (memcached, Redlock) Token is 0 and only the
//     first guarantee holds.
//   - A leader that crashes is replaced within its TTL (or, on
//     session-bound backends, its session timeout) plus one acquisition.
type Election struct {
	locker   *Locker
	key      string
	identity string
	opts     []Option
	backoff  RetryPolicy
	interval time.Duration
}

// ElectionOption configures NewElection.
type ElectionOption func(*Election)

// WithTermOptions sets acquisition options for every term's lease, such as
// WithTTL (how long a crashed leader blocks the others) or WithObserver.
// WithOwner and WithMetadata are Election's own and may not be given.
func WithTermOptions(opts ...Option) ElectionOption {
	return func(e *Election) { e.opts = append(e.opts, opts...) }
}

// WithRecampaignBackoff sets how long Lead waits before campaigning again
// after a term ends or a campaign fails; the default is Backoff{Min: 100ms,
// Max: 5s}. Attempts count from 1 and restart after every term.
func WithRecampaignBackoff(p RetryPolicy) ElectionOption {
	return func(e *Election) { e.backoff = p }
}

// WithObserveInterval sets how often Observe asks the backend who leads;
// the default is 1s.
func WithObserveInterval(d time.Duration) ElectionOption {
	return func(e *Election) { e.interval = d }
}

// NewElection returns an Election for the lock named key on l. identity
// names this candidate to the others (Leader returns it as the leader's
// Metadata): valid UTF-8 of 1 to MaxMetadataLen bytes, such as host and
// pid. Each term gets an owner id of its own, so two candidates of one
// identity still exclude each other. Errors wrap ErrInvalidOption or
// ErrInvalidKey; nothing is contacted.
func NewElection(l *Locker, key, identity string, opts ...ElectionOption) (*Election, error) {
	e := &Election{locker: l, key: key, identity: identity,
		backoff: Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}, interval: time.Second}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: NewElection: nil ElectionOption", ErrInvalidOption)
		}
		o(e)
	}
	switch {
	case l == nil:
		return nil, fmt.Errorf("%w: NewElection: nil Locker", ErrInvalidOption)
	case identity == "":
		return nil, fmt.Errorf("%w: NewElection: empty identity", ErrInvalidOption)
	case e.backoff == nil:
		return nil, fmt.Errorf("%w: NewElection: nil recampaign backoff", ErrInvalidOption)
	case e.interval <= 0:
		return nil, fmt.Errorf("%w: NewElection: WithObserveInterval(%v): must be positive", ErrInvalidOption, e.interval)
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	probe := defaultSettings()
	for _, o := range e.opts {
		if o == nil {
			return nil, fmt.Errorf("%w: NewElection: nil Option", ErrInvalidOption)
		}
		o(&probe)
	}
	if probe.owner != "" || probe.metadata() != "" {
		return nil, fmt.Errorf("%w: NewElection: WithOwner and WithMetadata are the Election's own (identity names the candidate)", ErrInvalidOption)
	}
	e.opts = append(e.opts, WithMetadata(identity))
	if err := CheckOptions(e.opts...); err != nil {
		return nil, fmt.Errorf("NewElection: %w", err)
	}
	return e, nil
}

// Key returns the key whose lock decides leadership.
func (e *Election) Key() string { return e.key }

// Term is one uninterrupted leadership of a candidate.
type Term struct {
	lease *Lease
}

// Err returns nil while the term lasts, else why it ended (wrapping
// ErrNotHeld, and ErrLockLost when leadership was lost rather than
// resigned). It checks the lease's validity deadline when called: call it
// right before each action that only the leader may take.
func (t *Term) Err() error { return t.lease.Err() }

// Context returns a context cancelled when the term ends.
func (t *Term) Context() context.Context { return t.lease.Context() }

// Done returns a channel closed when the term ends.
func (t *Term) Done() <-chan struct{} { return t.lease.Done() }

// Token returns the term's fencing token: strictly greater than every
// earlier term's of this key where the backend claims Fencing, else 0.
func (t *Term) Token() uint64 { return t.lease.Token() }

// Lease returns the lock lease behind the term.
func (t *Term) Lease() *Lease { return t.lease }

// Resign ends the term and frees leadership for the other candidates (a
// WithMinHold among the term options keeps it taken until the minimum
// hold ends). ErrNotHeld if the term had already ended.
func (t *Term) Resign(ctx context.Context) error { return t.lease.Release(ctx) }

// Campaign waits until this candidate leads or ctx ends. Its errors are
// Acquire's: ErrNotAcquired with ctx's error when ctx ends first.
func (e *Election) Campaign(ctx context.Context) (*Term, error) {
	// A fresh owner id per term, after every other option: also a
	// WithOwner among the Locker's defaults must not let two candidates
	// nest into one term. It is no shared owner id (WithMinHold is
	// allowed with it: nothing nests into a term's hold).
	opts := append(e.opts[:len(e.opts):len(e.opts)], termOwner(newOwnerID()))
	lease, err := e.locker.Acquire(ctx, e.key, opts...)
	if err != nil {
		return nil, err
	}
	return &Term{lease: lease}, nil
}

// Lead campaigns, runs fn for each term this candidate wins with a context
// that ends when the term ends (or ctx does), and campaigns again after a
// lost term, pausing per the recampaign backoff, until ctx ends.
//
// When ctx has ended by the time a campaign wins, fn does not run and the
// term is given up at once (also within a WithMinHold among the term
// options: only a term whose fn ran keeps a minimum hold). When fn
// returns while the term still lasts, Lead resigns; it returns
// fn's error, or nil when fn returned nil (the candidate is done); so it
// does when fn resigned the term itself (Term.Resign). When fn returns
// after its term was lost (ErrLockLost, or the Locker closed), its error
// is dropped and Lead campaigns again. If fn panics, the term is resigned before the panic
// goes on. Lead returns ctx's error when ctx ends, and at once an error
// that waiting cannot cure (ErrInvalidOption, also for a nil fn,
// ErrInvalidKey, ErrInvalidTTL, ErrClosed); a backend outage is waited
// out.
func (e *Election) Lead(ctx context.Context, fn func(ctx context.Context, t *Term) error) error {
	if fn == nil {
		return nilFn("lead", e.key)
	}
	attempt := 0
	for {
		term, err := e.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if permanent(err) {
				return err
			}
		} else {
			attempt = 0
			if done, err := e.serve(ctx, term, fn); done {
				return err
			}
		}
		attempt++
		if err := async.Sleep(ctx, e.backoff.Delay(attempt)); err != nil {
			return err
		}
	}
}

// serve runs fn for one term and reports whether Lead is done. The term
// is resigned in a deferred call, so that also a panic in fn (or
// runtime.Goexit) gives leadership up before it goes on: a term left
// behind would be refreshed for as long as the process lives.
//
// A term in which fn did not begin is given back at once, whatever
// WithMinHold says: a minimum hold is kept only by a term that led.
func (e *Election) serve(ctx context.Context, term *Term, fn func(context.Context, *Term) error) (done bool, err error) {
	tctx, cancel := context.WithCancelCause(term.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	release := term.lease.abandon
	defer func() {
		stop()
		cancel(nil)
		// Lost, not given up by fn's own Resign: campaign again.
		end := term.Err()
		lost := errors.Is(end, ErrLockLost) || errors.Is(end, ErrClosed)
		_ = detached(ctx, release) // ErrNotHeld after a lost or resigned term: nothing to free
		switch {
		case ctx.Err() != nil:
			done, err = true, ctx.Err()
		case lost:
			done, err = false, nil
		}
	}()
	if ctx.Err() != nil {
		return true, ctx.Err() // ctx ended as the campaign won: told to stop, it does not begin
	}
	release = term.lease.Release // fn leads: its term keeps its minimum hold
	return true, fn(tctx, term)  // fn's error when it returns while the term lasts
}

// permanent reports whether an acquisition error cannot be cured by
// campaigning again.
func permanent(err error) bool {
	return errors.Is(err, ErrInvalidOption) || errors.Is(err, ErrInvalidKey) || errors.Is(err, ErrInvalidTTL) || errors.Is(err, ErrClosed)
}

// Leader returns who leads now, as the backend sees it: Held false when
// nobody does; otherwise the leader's identity (Metadata), Token (its
// term's fencing token) and the time its lease has left. It needs a
// backend that can inspect locks (errors.ErrUnsupported otherwise).
func (e *Election) Leader(ctx context.Context) (LockInfo, error) {
	return e.locker.Inspect(ctx, e.key)
}

// Observe reports the leader each time it changes (a new term, or nobody
// leading), starting with the current one, by asking the backend every
// observe interval (WithObserveInterval) and, where the backend announces
// releases, as soon as the leader's lock is released and then quickly
// until a new term begins. A term shorter than the interval may go unseen
// on a backend without notifications. The channel is closed when ctx ends. Errors of the
// backend are skipped (the next poll tries again); ErrUnsupported or a
// closed Locker closes the channel.
func (e *Election) Observe(ctx context.Context) <-chan LockInfo {
	ch := make(chan LockInfo, 1)
	go func() {
		defer close(ch)
		var last *LockInfo
		w := e.leaderWatch()
		defer w.stop()
		for {
			w.arm(ctx)
			info, err := e.Leader(ctx)
			if errors.Is(err, errors.ErrUnsupported) || errors.Is(err, ErrClosed) {
				return
			}
			if err == nil && (last == nil || changed(*last, info)) {
				select {
				case ch <- info:
					last = &info
				case <-ctx.Done():
					return
				}
			}
			if w.wait(ctx, err == nil && info.Held) != nil {
				return
			}
		}
	}()
	return ch
}

// changed reports whether b shows another leader, or another term, than a.
func changed(a, b LockInfo) bool {
	return a.Held != b.Held || a.Owner != b.Owner || a.Token != b.Token
}
