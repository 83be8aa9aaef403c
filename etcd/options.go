package etcd

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

// config is what the Options set.
type config struct {
	defaults    []distlock.Option
	prefix      string
	sessionTTL  time.Duration
	margin      time.Duration // 0: default
	connectWait time.Duration // 0: the session TTL
	logging     bool
	user, pass  string      // WithAuth
	tls         *tls.Config // WithTLS
	noHoldWatch bool
	hooks       *testHooks
	err         error // the first bad option value
}

// Option configures a Locker (New, Dial). Every value is checked when the
// Locker is made: a bad one makes New or Dial return an error wrapping
// distlock.ErrInvalidOption.
type Option func(*config)

// bad records the first bad option value.
func (c *config) bad(option string, value any, why string) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: etcd: %s(%v): %s", backend.ErrInvalidOption, option, value, why)
	}
}

// WithDefaults sets options applied to every acquisition of the Locker (they
// are passed to distlock.New). New and Dial refuse unusable ones
// (distlock.CheckOptions) with the error an acquisition would return.
func WithDefaults(opts ...distlock.Option) Option {
	return func(c *config) { c.defaults = append(c.defaults, opts...) }
}

// WithPrefix sets the etcd key prefix under which every lock lives (default
// DefaultPrefix). It must start with "/", not end with "/", and be valid
// UTF-8 of at most 512 bytes. Two Lockers contend for a key only if they
// use the same prefix.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithSessionTTL sets the TTL of the session's etcd lease (default
// DefaultSessionTTL, whole seconds, at least 2s): a holder that dies or is
// cut off frees its locks this long after the cluster last heard from it,
// and a live holder declares its leases lost at last keepalive + TTL −
// margin. The server may grant a longer TTL (its minimum is 1.5 × its
// election timeout); the granted value is used.
func WithSessionTTL(d time.Duration) Option {
	return func(c *config) {
		if d < 2*time.Second || d%time.Second != 0 || d > 24*time.Hour {
			c.bad("WithSessionTTL", d, "must be whole seconds from 2s to 24h")
			return
		}
		c.sessionTTL = d
	}
}

// WithSessionMargin sets how long before the lease could expire on the
// server the leases of a session that cannot renew it are declared lost
// (default a tenth of the TTL, at least 100ms). It absorbs this process's
// scheduling delays and the time between a keepalive's send and the
// leader's renewal. It must be positive and less than half the TTL.
func WithSessionMargin(d time.Duration) Option {
	return positive("WithSessionMargin", d, func(c *config) { c.margin = d })
}

// WithConnectTimeout bounds how long an acquisition waits for the cluster
// to grant a session lease before it fails with ErrUnavailable (default:
// the session TTL). It must be positive.
func WithConnectTimeout(d time.Duration) Option {
	return positive("WithConnectTimeout", d, func(c *config) { c.connectWait = d })
}

// positive is an Option that calls set if d is positive and records the
// bad value otherwise.
func positive(name string, d time.Duration, set func(*config)) Option {
	return func(c *config) {
		if d <= 0 {
			c.bad(name, d, "must be positive")
			return
		}
		set(c)
	}
}

// WithHoldWatch sets whether the Locker watches the keys of the locks it
// holds (default true), so that a deletion by another client (an
// operator's ForceRelease, etcdctl del) ends the lease at once with
// ErrLockLost. The Locker keeps one watch for this, over the deletions
// under its prefix, while it holds locks: no goroutine or watch per held
// lock, but while it holds any, every deletion under the prefix, by any
// client, is delivered to it. Without it the holder learns of such
// a deletion at its next Refresh, Release or nested acquisition
// (ErrNotHeld); the loss of the session lease is reported on Done either
// way.
func WithHoldWatch(on bool) Option {
	return func(c *config) { c.noHoldWatch = !on }
}

// WithAuth makes Dial's client authenticate with etcd's user name and
// password (etcd's auth: `etcdctl user add`, `etcdctl auth enable`). The
// client then authenticates when Dial makes it, within the connect
// timeout: refused credentials fail Dial with an error wrapping ErrAuth
// (not ErrUnavailable: waiting does not cure it), and the password never
// appears in an error. Both must be non-empty. New ignores it (its client
// is configured by the caller).
func WithAuth(user, password string) Option {
	return func(c *config) {
		if user == "" || password == "" {
			c.bad("WithAuth", fmt.Sprintf("%q", user), "needs a user name and a password")
			return
		}
		c.user, c.pass = user, password
	}
}

// WithTLS makes Dial's client connect with TLS (cfg: the CAs that sign the
// members' certificates, a client certificate). Endpoints given as
// host:port are dialled with TLS; the certificates must name the hosts as
// the endpoints do. New ignores it.
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) {
		if cfg == nil {
			c.bad("WithTLS", "nil", "needs a *tls.Config")
			return
		}
		c.tls = cfg
	}
}

// newConfig applies opts and checks every value: the one validating path
// of New, Dial and the URL opener.
func newConfig(opts []Option) (*config, error) {
	c := &config{prefix: DefaultPrefix, sessionTTL: DefaultSessionTTL}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if c.err == nil {
		if why := prefixProblem(c.prefix); why != "" {
			c.bad("WithPrefix", fmt.Sprintf("%q", c.prefix), why)
		}
	}
	if c.err == nil && c.margin >= c.sessionTTL/2 {
		c.bad("WithSessionMargin", c.margin, fmt.Sprintf("must be less than half the session TTL %v", c.sessionTTL))
	}
	if c.err == nil {
		if err := distlock.CheckOptions(c.defaults...); err != nil {
			c.err = fmt.Errorf("etcd: WithDefaults: %w", err)
		}
	}
	return c, c.err
}

// prefixProblem says what is wrong with p as a key prefix, "" if nothing.
func prefixProblem(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return "must start with /"
	case p == "/":
		return "must not be the root"
	case strings.HasSuffix(p, "/"):
		return "must not end with /"
	case len(p) > 512:
		return "longer than 512 bytes"
	case !utf8.ValidString(p):
		return "not valid UTF-8"
	}
	return ""
}

// margin is the loss margin for a granted TTL.
func (c *config) marginFor(ttl time.Duration) time.Duration {
	m := c.margin
	if m == 0 {
		m = max(ttl/10, 100*time.Millisecond)
	}
	return min(m, ttl/2)
}

// connectTimeout bounds the wait for a session lease.
func (c *config) connectTimeout() time.Duration {
	if c.connectWait > 0 {
		return c.connectWait
	}
	return c.sessionTTL
}
