// Package gocronlock plugs distlock into gocron v2's distributed scheduling
// (github.com/go-co-op/gocron/v2): a Locker for
// gocron.WithDistributedLocker / WithDistributedJobLocker, so each run of a
// job happens on one scheduler of the fleet, and an Elector for
// gocron.WithDistributedElector, so only the leader's scheduler runs jobs.
//
// It is a module of its own: distlock itself never depends on gocron.
//
// The hole it closes: gocron asks the Locker for a job's lock when that
// scheduler's timer fires, and releases it when the job returns. A short
// job on one host finishes, and releases, before a host whose timer fires
// a little later asks — and that host runs the job again (gocron#841, the
// ShedLock issue of lockAtLeastFor). Give NewLocker distlock.WithMinHold
// longer than the spread of your schedulers' timers (but shorter than the
// job's interval): the lock then stays taken until at least acquisition +
// the minimum hold, whatever the job's duration, and the late host skips
// the run.
package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/go-co-op/gocron/v2"
)

// Locker is a gocron.Locker over a distlock.Locker. Lock makes one attempt
// (TryAcquire): when another scheduler holds the job's lock it returns an
// error wrapping distlock.ErrNotAcquired, and gocron skips this run. The
// lock is held, and refreshed, until gocron unlocks it after the job.
type Locker struct {
	l      *distlock.Locker
	prefix string
	opts   []distlock.Option
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker that locks key prefix+<job name> on l with
// opts (typically distlock.WithMinHold; also WithTTL, WithMetadata). The
// options are checked now: a bad one is an error wrapping
// distlock.ErrInvalidOption, as is a nil l.
func NewLocker(l *distlock.Locker, prefix string, opts ...distlock.Option) (*Locker, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: gocronlock.NewLocker: nil Locker", distlock.ErrInvalidOption)
	}
	if err := distlock.CheckOptions(opts...); err != nil {
		return nil, fmt.Errorf("gocronlock.NewLocker: %w", err)
	}
	return &Locker{l: l, prefix: prefix, opts: opts}, nil
}

// Lock takes the job's lock if it is free now.
func (g *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	lease, err := g.l.TryAcquire(ctx, g.prefix+key, g.opts...)
	if err != nil {
		return nil, err
	}
	return unlocker{lease}, nil
}

type unlocker struct{ lease *distlock.Lease }

// Unlock releases the lease (within its minimum hold, the lock stays
// taken until the hold ends), and returns once the backend answered: the
// release keeps ctx's values but not its end (gocron passes the job's ctx,
// which has ended when the scheduler shut down or the job was removed
// mid-run), bounded by unlockTimeout. A lease lost while the job ran
// reports distlock.ErrLockLost.
func (u unlocker) Unlock(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
	defer cancel()
	return u.lease.Release(ctx)
}

// unlockTimeout bounds Unlock's release; a lock it could not free expires
// at its TTL.
const unlockTimeout = 5 * time.Second

// ErrNotLeader is what Elector.IsLeader returns while this scheduler does
// not lead; gocron then skips the run.
var ErrNotLeader = errors.New("gocronlock: not the leader")

// Elector is a gocron.Elector over a distlock.Election: it campaigns in the
// background from Start until its ctx ends, and IsLeader returns nil only
// while this candidate's term lasts (Term.Err, which checks the lease's
// validity deadline on each call, so a scheduler paused past its lease
// does not run a job on waking).
type Elector struct {
	e     *distlock.Election
	start sync.Once

	mu   sync.Mutex
	term *distlock.Term
	done chan struct{}
	err  error
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector returns an Elector for e; call Start to campaign.
func NewElector(e *distlock.Election) (*Elector, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: gocronlock.NewElector: nil Election", distlock.ErrInvalidOption)
	}
	return &Elector{e: e, done: make(chan struct{})}, nil
}

// Start campaigns until ctx ends (then the term, if any, is resigned);
// Done is closed after that. Only the first call starts a campaign: later
// ones do nothing.
func (el *Elector) Start(ctx context.Context) {
	el.start.Do(func() { go el.campaign(ctx) })
}

// campaign is Start's goroutine.
func (el *Elector) campaign(ctx context.Context) {
	defer close(el.done)
	err := el.e.Lead(ctx, func(tctx context.Context, t *distlock.Term) error {
		el.set(t)
		<-tctx.Done()
		el.set(nil)
		return nil
	})
	el.mu.Lock()
	el.err = err
	el.mu.Unlock()
}

func (el *Elector) set(t *distlock.Term) {
	el.mu.Lock()
	el.term = t
	el.mu.Unlock()
}

// Done is closed when the campaign has stopped (Start's ctx ended, or an
// error that campaigning again cannot cure; see Err).
func (el *Elector) Done() <-chan struct{} { return el.done }

// Err returns why the campaign stopped, after Done is closed.
func (el *Elector) Err() error {
	el.mu.Lock()
	defer el.mu.Unlock()
	return el.err
}

// IsLeader returns nil while this candidate leads, else ErrNotLeader (the
// term's ending cause wrapped in, when it just ended).
func (el *Elector) IsLeader(context.Context) error {
	el.mu.Lock()
	t := el.term
	el.mu.Unlock()
	if t == nil {
		return ErrNotLeader
	}
	if err := t.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return nil
}
