package redlock

import (
	"fmt"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/redissub"
)

// Defaults of the Redlock parameters.
const (
	// DefaultNodeTimeout bounds each node's part of an acquire or refresh
	// (the seeds: "tens of milliseconds", far below the TTL), so a dead or
	// slow node costs at most this much of the lock's validity.
	DefaultNodeTimeout = 50 * time.Millisecond
	// DefaultDriftFactor and DefaultDriftMin make the clock-drift allowance
	// ttl·0.01 + 2ms, as in the Redlock algorithm.
	DefaultDriftFactor = 0.01
	DefaultDriftMin    = 2 * time.Millisecond
	// MinReleaseWait is the least time Release waits for a node's answer,
	// whatever the node timeout (a release does not consume validity).
	MinReleaseWait = time.Second
)

// Option configures New. Every value is checked by New, which returns an
// error wrapping distlock.ErrInvalidOption for a value out of range.
type Option func(*config)

type config struct {
	defaults       []distlock.Option
	prefix         string
	nodeTimeout    time.Duration
	driftFactor    float64
	driftMin       time.Duration
	confirmTimeout time.Duration // 0: the Subscriber's default
	linger         time.Duration // 0: the Subscriber's default; negative: none
	closeClients   bool
	// subscribeTimeoutSet, lingerSet: the option was given (its zero
	// value then means something else than the default).
	subscribeTimeoutSet, lingerSet bool
}

func defaultConfig() config {
	return config{
		prefix:      redislua.DefaultPrefix,
		nodeTimeout: DefaultNodeTimeout,
		driftFactor: DefaultDriftFactor,
		driftMin:    DefaultDriftMin,
	}
}

// WithDefaults sets options applied to every acquisition of the Locker
// (passed to distlock.New), such as distlock.WithTTL.
func WithDefaults(opts ...distlock.Option) Option {
	return func(c *config) { c.defaults = append(c.defaults, opts...) }
}

// WithPrefix sets the prefix of every Redis key and channel the Locker uses
// on every node (default "distlock:"). Lockers must use the same prefix to
// contend for the same locks.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithNodeTimeout sets how long an acquire or refresh waits for each node
// (default 50ms). It should be far below the TTL: a node that has not
// answered by then counts as failed, so it costs at most this much of the
// validity. It is capped at the validity of each request. It must be
// positive.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) { c.nodeTimeout = d }
}

// WithDrift sets the clock-drift allowance: a lock acquired or refreshed
// with ttl is counted valid for ttl − elapsed − (ttl·factor + min), where
// elapsed is the time the quorum took (default factor 0.01, min 2ms). factor
// must be in [0, 1) and min at least 0.
func WithDrift(factor float64, min time.Duration) Option {
	return func(c *config) { c.driftFactor, c.driftMin = factor, min }
}

// WithSubscribeTimeout bounds how long a waiter waits for a node to confirm
// its pub/sub subscription (default 2s); a waiter needs the confirmation of
// N − quorum + 1 nodes, and falls back to polling with its retry policy
// without it. It must be positive.
func WithSubscribeTimeout(d time.Duration) Option {
	return func(c *config) { c.confirmTimeout, c.subscribeTimeoutSet = d, true }
}

// WithSubscriptionLinger keeps each node's shared pub/sub connection open
// for d after its last waiter left (default 1s). 0 closes it at once; d
// must not be negative.
func WithSubscriptionLinger(d time.Duration) Option {
	return func(c *config) { c.linger, c.lingerSet = d, true }
}

// WithCloseClients makes the Locker's Close also close the clients. By
// default New does not take ownership of the caller's clients.
func WithCloseClients() Option {
	return func(c *config) { c.closeClients = true }
}

// newConfig applies opts to the defaults.
func newConfig(opts []Option) config {
	c := defaultConfig()
	for _, o := range opts {
		o(&c)
	}
	return c
}

// check returns an ErrInvalidOption naming the first option out of range.
func (c *config) check() error {
	bad := func(option, rule string) error {
		return fmt.Errorf("%w: redlock: %s: %s", backend.ErrInvalidOption, option, rule)
	}
	if err := distlock.CheckOptions(c.defaults...); err != nil {
		return fmt.Errorf("redlock: WithDefaults: %w", err)
	}
	switch {
	case c.nodeTimeout <= 0:
		return bad(fmt.Sprintf("WithNodeTimeout(%v)", c.nodeTimeout), "must be positive")
	case !(c.driftFactor >= 0 && c.driftFactor < 1):
		return bad(fmt.Sprintf("WithDrift(%v, %v)", c.driftFactor, c.driftMin), "the factor must be in [0, 1)")
	case c.driftMin < 0:
		return bad(fmt.Sprintf("WithDrift(%v, %v)", c.driftFactor, c.driftMin), "the minimum must not be negative")
	case c.subscribeTimeoutSet && c.confirmTimeout <= 0:
		return bad(fmt.Sprintf("WithSubscribeTimeout(%v)", c.confirmTimeout), "must be positive")
	case c.lingerSet && c.linger < 0:
		return bad(fmt.Sprintf("WithSubscriptionLinger(%v)", c.linger), "must not be negative (0 closes the connection at once)")
	}
	return nil
}

// subscriberOptions are the per-node Subscribers' options.
func (c *config) subscriberOptions() redissub.SubscriberOptions {
	linger := c.linger
	if c.lingerSet && linger == 0 {
		linger = -1 // the Subscriber's "close at once"
	}
	return redissub.SubscriberOptions{ConfirmTimeout: c.confirmTimeout, Linger: linger}
}
