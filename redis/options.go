package redis

import (
	"fmt"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/redislua"
)

// Option configures New. New checks every option's value.
type Option func(*config)

type config struct {
	defaults       []distlock.Option
	prefix         string
	confirmTimeout time.Duration
	linger         time.Duration
	closeClient    bool
	fair           bool
	wait           waitPolicy
	// errs are the option values New refuses, in the order given.
	errs []error
}

// newConfig applies opts over the defaults and reports the first refused
// option value, as an error wrapping ErrInvalidOption.
func newConfig(opts []Option) (config, error) {
	c := config{prefix: redislua.DefaultPrefix}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if len(c.errs) > 0 {
		return c, c.errs[0]
	}
	if err := distlock.CheckOptions(c.defaults...); err != nil {
		return c, fmt.Errorf("redis: WithDefaults: %w", err)
	}
	return c, nil
}

// invalid records a refused option value.
func (c *config) invalid(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: redis: %s", backend.ErrInvalidOption, fmt.Sprintf(format, args...)))
}

// WithDefaults sets options applied to every acquisition of the Locker
// (passed to distlock.New), such as distlock.WithTTL.
func WithDefaults(opts ...distlock.Option) Option {
	return func(c *config) { c.defaults = append(c.defaults, opts...) }
}

// WithPrefix sets the prefix of every Redis key and channel the Locker uses
// (default "distlock:"). Lockers must use the same prefix to contend for the
// same locks. Any prefix works, the empty one included: the names of one
// lock always share a Cluster slot.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithSubscribeTimeout bounds how long a waiter waits for the server to
// confirm its pub/sub subscription before it falls back to polling (default
// 2s). d must be positive.
func WithSubscribeTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("WithSubscribeTimeout(%v): must be positive", d)
		}
		c.confirmTimeout = d
	}
}

// WithSubscriptionLinger keeps the Locker's shared pub/sub connection open
// for d after its last waiter left, so bursts of contention do not dial a
// new connection each time (default 1s). 0 or less closes it as soon as the
// last waiter leaves.
func WithSubscriptionLinger(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			d = -1
		}
		c.linger = d
	}
}

// WithFair makes waiters queue in Redis, in arrival order across every
// Locker, process and host that uses WithFair for the key, and hands a
// released lock directly to the first waiter: the release writes the lock
// for that waiter and publishes the grant, so the waiter holds it without
// another round trip (see "Fair queue" in the package documentation). The
// Locker then reports the Fair capability. Lockers without WithFair on the
// same key still respect the queue's grants but do not queue themselves.
func WithFair() Option {
	return func(c *config) { c.fair = true }
}

// WithCloseClient makes the Locker's Close also close the client. By
// default New does not take ownership of the caller's client.
func WithCloseClient() Option {
	return func(c *config) { c.closeClient = true }
}
