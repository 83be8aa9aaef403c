package distlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Observer receives the events of a Locker's acquisitions and leases, for
// metrics, traces and logs (the module github.com/distlock/distlock/otel
// turns them into OpenTelemetry metrics and spans). Set one with
// WithObserver, per acquisition or, through Open/New, for every acquisition
// of a Locker. Without one, no event is built: the hot path pays one nil
// check.
//
// Methods are called synchronously, on the goroutine where the event
// happens (the caller's, or the refresh scheduler's for automatic refreshes
// and expiries), possibly from many goroutines at once; they must be quick
// and must not block or call back into the Lease. The ctx that a Start
// method returns is passed to the matching End method and to the backend for
// the operation itself, so it must be the given ctx or derived from it.
//
// Every acquisition that starts ends: AcquireStart is followed by exactly one
// AcquireEnd. Every lease that AcquireEnd reports acquired ends exactly once,
// with either ReleaseStart and ReleaseEnd (the holder released it) or
// LeaseEnded (lost, or its Locker closed).
type Observer interface {
	// AcquireStart: Acquire or TryAcquire began, with a valid key and
	// valid options.
	AcquireStart(ctx context.Context, e AcquireEvent) context.Context
	// AcquireEnd: the acquisition ended, with r.Err nil if the lease is
	// held.
	AcquireEnd(ctx context.Context, r AcquireResult)
	// Refreshed: a refresh of a held lease ended (err nil: extended by
	// ttl). auto tells an automatic refresh from Lease.Refresh. A refresh
	// that failed for good is followed by LeaseEnded.
	Refreshed(e LeaseEvent, ttl time.Duration, auto bool, err error)
	// LeaseEnded: the lease ended without Release: cause wraps ErrLockLost
	// (expired, session lost, refresh refused) or ErrClosed (its Locker
	// closed). It is called after Err reports the cause and before Done
	// and Context are closed, so code woken by Done sees the event counted.
	LeaseEnded(e LeaseEvent, cause error)
	// ReleaseStart: Release of a held lease began.
	ReleaseStart(ctx context.Context, e LeaseEvent) context.Context
	// ReleaseEnd: the release ended; err is the backend's answer (the
	// lease has ended locally either way).
	ReleaseEnd(ctx context.Context, e LeaseEvent, err error)
}

// NopObserver does nothing. Embed it in an Observer that handles some of
// the events only, so that it keeps compiling when Observer gains methods.
type NopObserver struct{}

// AcquireStart implements Observer.
func (NopObserver) AcquireStart(ctx context.Context, _ AcquireEvent) context.Context { return ctx }

// AcquireEnd implements Observer.
func (NopObserver) AcquireEnd(context.Context, AcquireResult) {}

// Refreshed implements Observer.
func (NopObserver) Refreshed(LeaseEvent, time.Duration, bool, error) {}

// LeaseEnded implements Observer.
func (NopObserver) LeaseEnded(LeaseEvent, error) {}

// ReleaseStart implements Observer.
func (NopObserver) ReleaseStart(ctx context.Context, _ LeaseEvent) context.Context { return ctx }

// ReleaseEnd implements Observer.
func (NopObserver) ReleaseEnd(context.Context, LeaseEvent, error) {}

// AcquireEvent names one acquisition.
type AcquireEvent struct {
	Backend string // the Locker's backend name, such as "redis"
	Key     string
	Op      string // "acquire" or "try-acquire"
}

// AcquireResult is how an acquisition ended.
type AcquireResult struct {
	AcquireEvent
	Owner    string        // the holder identity asked for
	Token    uint64        // the lease's fencing token, when acquired
	Attempts int           // attempts made; a native wait counts as one
	Waited   time.Duration // from AcquireStart to the outcome
	Err      error         // nil: acquired
}

// Outcome classifies r for metrics: "acquired", "busy" (another owner held
// the lock: TryAcquire refused, or Acquire's ctx ended while waiting),
// "unavailable", "closed", or "error".
func (r AcquireResult) Outcome() string {
	switch {
	case r.Err == nil:
		return "acquired"
	case errors.Is(r.Err, ErrClosed):
		return "closed"
	case errors.Is(r.Err, ErrUnavailable):
		return "unavailable"
	case errors.Is(r.Err, ErrNotAcquired):
		return "busy"
	}
	return "error"
}

// LeaseEvent names one held lease.
type LeaseEvent struct {
	Backend string
	Key     string
	Owner   string
	Token   uint64
	Held    time.Duration // since the acquire request was sent
}

// Cause classifies why a lease ended without Release, for metrics:
// "expired" (its validity deadline passed without a refresh), "session"
// (the backend reported the lock lost, or its session timed out),
// "refused" (a refresh found another owner or no lock), "closed" (its
// Locker closed), "late" (granted after its validity had ended) or "lost".
func Cause(err error) string {
	var m *marked
	switch {
	case errors.As(err, &m):
		return m.cause
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, errExpired):
		return "expired"
	case errors.Is(err, errSessionExpired):
		return "session"
	case errors.Is(err, errLate):
		return "late"
	}
	return "lost"
}

// marked labels an error with its Cause without changing its text.
type marked struct {
	cause string
	error
}

func (m *marked) Unwrap() error { return m.error }

// WithObserver sets the Observer of the acquisition and of the lease it
// yields; given to Open or New, of every acquisition of the Locker. nil
// removes one set before.
func WithObserver(o Observer) Option {
	return func(s *settings) {
		w := s.watched()
		w.observer = o
	}
}

// WithLogger makes distlock log to l what an operator must hear of: a lease
// lost (Warn, with key, owner, token and cause); the first automatic
// refresh of a held lease that failed, or had no answer by halfway to the
// deadline, while it may still succeed (Warn; later failures of the same
// run at Debug, the next success at Info); and, with WithRetryUnavailable,
// an Acquire waiting out an outage (Warn at its start, Info while it
// lasts). Nothing is logged on the hot path of a healthy lock. nil turns
// logging off.
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) {
		w := s.watched()
		w.logger = l
	}
}

// watching holds the options few acquisitions use: what WithObserver,
// WithLogger, WithMetadata and WithMinHold set.
type watching struct {
	observer Observer
	logger   *slog.Logger
	metadata string        // WithMetadata
	minHold  time.Duration // WithMinHold
}

// watched returns s's watching to set, a copy of the one set before (an
// Option must not change what another acquisition's settings point to).
func (s *settings) watched() *watching {
	w := &watching{}
	if s.watching != nil {
		*w = *s.watching
	}
	s.watching = w
	return w
}

func (s *settings) observer() Observer {
	if s.watching == nil {
		return nil
	}
	return s.watching.observer
}

func (s *settings) logger() *slog.Logger {
	if s.watching == nil {
		return nil
	}
	return s.watching.logger
}

// watch is what a lease reports to: built only when an Observer or a
// logger is set, so that unobserved leases carry one nil pointer.
type watch struct {
	obs    Observer
	log    *slog.Logger
	ev     LeaseEvent // Held filled in per event
	sentAt time.Time  // the acquire request's send time

	// A lease lost between its grant and AcquireEnd is reported after
	// AcquireEnd (announced), never before.
	mu      sync.Mutex
	told    bool  // AcquireEnd was called (always true without an Observer)
	pending error // the loss that came first
	failing bool  // automatic refreshes fail: the first failure was logged
}

func newWatch(r *request, backendName string) *watch {
	o, log := r.observer(), r.logger()
	if o == nil && log == nil {
		return nil
	}
	return &watch{obs: o, log: log, told: o == nil,
		ev: LeaseEvent{Backend: backendName, Key: r.key, Owner: r.owner}}
}

// announced is called after AcquireEnd reported the lease acquired: a
// loss held back until then is reported now.
func (w *watch) announced() {
	w.mu.Lock()
	w.told = true
	cause := w.pending
	w.pending = nil
	w.mu.Unlock()
	if cause != nil {
		w.ended(cause)
	}
}

func (w *watch) event() LeaseEvent {
	e := w.ev
	e.Held = time.Since(w.sentAt)
	return e
}

// ended reports a lease that ended without Release.
func (w *watch) ended(cause error) {
	w.mu.Lock()
	if !w.told {
		w.pending = cause
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	e := w.event()
	if w.obs != nil {
		w.obs.LeaseEnded(e, cause)
	}
	if w.log != nil && !errors.Is(cause, ErrClosed) {
		w.log.Warn("distlock: lease lost", "backend", e.Backend, "key", e.Key, "owner", e.Owner,
			"token", e.Token, "held", e.Held, "cause", Cause(cause), "err", cause)
	}
}

// refreshed reports a refresh's outcome; a failure that ends the lease is
// reported by ended as well. held: the lease was still held when the
// refresh ended (the logger hears nothing of a refresh that ended after
// the lease).
func (w *watch) refreshed(ttl time.Duration, auto bool, err error, held bool) {
	e := w.event()
	if w.obs != nil {
		w.obs.Refreshed(e, ttl, auto, err)
	}
	if w.log == nil || !auto || !held {
		return
	}
	switch {
	case err == nil:
		if w.setFailing(false) {
			w.log.Info("distlock: automatic refresh succeeded again", "backend", e.Backend,
				"key", e.Key, "owner", e.Owner, "token", e.Token)
		}
	case errors.Is(err, ErrNotHeld):
	case !w.setFailing(true):
		w.log.Warn("distlock: automatic refresh failed, retrying before the deadline", "backend", e.Backend,
			"key", e.Key, "owner", e.Owner, "token", e.Token, "err", err)
	default:
		w.log.Debug("distlock: automatic refresh failed again", "backend", e.Backend,
			"key", e.Key, "owner", e.Owner, "token", e.Token, "err", err)
	}
}

// unanswered warns, as for a first failed refresh, that an automatic
// refresh of the held lease has had no answer for waited.
func (w *watch) unanswered(waited time.Duration) {
	if w.log == nil || w.setFailing(true) {
		return
	}
	e := w.event()
	w.log.Warn("distlock: automatic refresh has no answer yet, the lease is lost at its deadline unless it succeeds", "backend", e.Backend,
		"key", e.Key, "owner", e.Owner, "token", e.Token, "waited", waited.Round(time.Millisecond))
}

// setFailing records whether automatic refreshes fail and returns what was
// recorded before.
func (w *watch) setFailing(on bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	was := w.failing
	w.failing = on
	return was
}

// refused is the loss of a lease whose refresh the backend refused.
func refused(err error) error {
	return &marked{"refused", fmt.Errorf("%w: refresh refused: %w", ErrLockLost, err)}
}
