package zookeeper

import (
	"fmt"
	"io"
	"log"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

// LossPolicy says when a lease is declared lost while the connection to
// the ensemble is interrupted, as Curator's ConnectionStateErrorPolicy does.
type LossPolicy int

const (
	// LoseOnSessionTimeout (the default, Curator's
	// SessionConnectionStateErrorPolicy) keeps leases through a
	// disconnect and declares them lost at last contact + negotiated
	// session timeout − margin, before the server can expire the session,
	// or at once when the server reports the session expired.
	LoseOnSessionTimeout LossPolicy = iota
	// LoseOnDisconnect (Curator's StandardConnectionStateErrorPolicy)
	// declares every lease of a session lost as soon as its connection
	// drops, even if the session could still be resumed.
	LoseOnDisconnect
)

// String returns the policy as the URL parameter loss_policy spells it.
func (p LossPolicy) String() string {
	switch p {
	case LoseOnSessionTimeout:
		return "session_timeout"
	case LoseOnDisconnect:
		return "disconnect"
	}
	return fmt.Sprintf("LossPolicy(%d)", int(p))
}

// config is what the Options set.
type config struct {
	defaults       []distlock.Option
	basePath       string
	sessionTimeout time.Duration // requested (Dial, Connect); the conn's (New, uninstrumented)
	margin         time.Duration // 0: default
	policy         LossPolicy
	acl            []zk.ACL
	dialer         zk.Dialer
	logger         zk.Logger
	connectWait    time.Duration // 0: the session timeout
	hooks          *testHooks
	err            error // the first bad option value
}

// Option configures a Locker (New, Dial) or a connection (Connect). Every
// value is checked when the Locker or connection is made: a bad one makes
// New, Dial or Connect return an error wrapping distlock.ErrInvalidOption.
type Option func(*config)

// bad records the first bad option value.
func (c *config) bad(option string, value any, why string) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: zookeeper: %s(%v): %s", backend.ErrInvalidOption, option, value, why)
	}
}

// WithDefaults sets options applied to every acquisition of the Locker (they
// are passed to distlock.New). New and Dial refuse unusable ones
// (distlock.CheckOptions) with the error an acquisition would return.
func WithDefaults(opts ...distlock.Option) Option {
	return func(c *config) { c.defaults = append(c.defaults, opts...) }
}

// WithBasePath sets the node under which every lock lives (default
// DefaultBasePath). It must be an absolute ZooKeeper path that the server
// accepts; its missing components are created as persistent nodes. Each
// key gets a container node below it, which the server deletes once it is
// empty.
func WithBasePath(path string) Option {
	return func(c *config) { c.basePath = path }
}

// WithSessionTimeout sets the session timeout that Dial and Connect ask the
// server for (default DefaultSessionTimeout); the server may clamp it and
// the negotiated value is the one used. For New over a *zk.Conn that was
// not made by Connect, distlock cannot read the negotiated value back
// through go-zookeeper's API: pass the value the server granted (or a lower
// bound of it), or New fails with ErrInvalidOption. It must be positive.
func WithSessionTimeout(d time.Duration) Option {
	return durationOption("WithSessionTimeout", d, d > 0, "must be positive", func(c *config) *time.Duration { return &c.sessionTimeout })
}

// WithSessionMargin sets how long before the session could expire on the
// server the leases of an unreachable session are declared lost: at last
// contact + negotiated timeout − margin. The default is a tenth of the
// negotiated timeout, at least 100ms. The margin absorbs scheduling delays
// of this process and the ensemble's internal delay (about one tickTime)
// between a server hearing from the client and the leader noting it. A
// margin of half the negotiated timeout or more is cut to half (the URL
// parameter session_margin is refused then). It must not be negative.
func WithSessionMargin(d time.Duration) Option {
	return durationOption("WithSessionMargin", d, d >= 0, "must not be negative", func(c *config) *time.Duration { return &c.margin })
}

// WithLossPolicy sets when leases are declared lost during a disconnect
// (default LoseOnSessionTimeout).
func WithLossPolicy(p LossPolicy) Option {
	return func(c *config) {
		if p != LoseOnSessionTimeout && p != LoseOnDisconnect {
			c.bad("WithLossPolicy", int(p), "unknown policy")
			return
		}
		c.policy = p
	}
}

// WithACL sets the ACL of the nodes the Locker creates (default
// zk.WorldACL(zk.PermAll)). It must not be empty.
func WithACL(acl []zk.ACL) Option {
	return func(c *config) {
		if len(acl) == 0 {
			c.bad("WithACL", acl, "must not be empty")
			return
		}
		c.acl = acl
	}
}

// WithDialer sets the dialer of the connections Dial and Connect make
// (default net.DialTimeout). Pass it here, not as zk.WithDialer: distlock
// wraps it to read the negotiated session timeout from the handshake.
func WithDialer(d zk.Dialer) Option {
	return func(c *config) { c.dialer = d }
}

// WithLogger sets the logger of the connections Dial and Connect make
// (default: none; distlock reports failures through its errors and lease
// endings). go-zookeeper's informational messages stay off; its errors
// (failed dials, dropped connections) go to l. zk.DefaultLogger is the
// standard logger.
func WithLogger(l zk.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithConnectTimeout bounds how long an acquisition waits for a usable
// session (connecting, or reconnecting after a loss) and for the outcome
// of a create interrupted by a connection loss before it fails with
// ErrUnavailable. The default is the negotiated session timeout. It must
// be positive. A wait for a session ends sooner, after about a second,
// when the client has dialed every server address and each refused or did
// not answer: the ErrUnavailable then names each address and its error.
func WithConnectTimeout(d time.Duration) Option {
	return durationOption("WithConnectTimeout", d, d > 0, "must be positive", func(c *config) *time.Duration { return &c.connectWait })
}

// durationOption is an Option that sets the field of a config to d if ok,
// and records the bad value (why) otherwise.
func durationOption(name string, d time.Duration, ok bool, why string, field func(*config) *time.Duration) Option {
	return func(c *config) {
		if !ok {
			c.bad(name, d, why)
			return
		}
		*field(c) = d
	}
}

// DiscardLogger is a zk.Logger that drops every message.
var DiscardLogger zk.Logger = log.New(io.Discard, "", 0)

// newConfig applies opts and checks every value: the one validating path
// of New, Dial, Connect and the URL opener.
func newConfig(opts []Option) (*config, error) {
	c := &config{basePath: DefaultBasePath, acl: zk.WorldACL(zk.PermAll)}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if c.err == nil {
		if why := basePathProblem(c.basePath); why != "" {
			c.bad("WithBasePath", fmt.Sprintf("%q", c.basePath), why)
		}
	}
	if c.err == nil {
		if err := distlock.CheckOptions(c.defaults...); err != nil {
			c.err = fmt.Errorf("zookeeper: WithDefaults: %w", err)
		}
	}
	return c, c.err
}

// validateBasePath accepts an absolute path that both go-zookeeper and the
// ZooKeeper server accept.
func validateBasePath(p string) error {
	if why := basePathProblem(p); why != "" {
		return fmt.Errorf("%w: zookeeper: base path %q: %s", backend.ErrInvalidOption, p, why)
	}
	return nil
}

// basePathProblem says what is wrong with p as a base path, "" if nothing
// (the server rejects, among others, characters outside the Basic
// Multilingual Plane such as emoji, and U+D800–U+F8FF).
func basePathProblem(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return "must start with /"
	case p == "/":
		return "must not be the root"
	case strings.HasSuffix(p, "/"):
		return "must not end with /"
	case !utf8.ValidString(p):
		return "not valid UTF-8"
	}
	for i, comp := range strings.Split(p[1:], "/") {
		switch {
		case comp == "":
			return "empty component"
		case comp == "." || comp == "..":
			return "relative component"
		case i == 0 && comp == "zookeeper":
			return "/zookeeper is reserved for the server"
		}
		for _, r := range comp {
			if !pathRuneOK(r) {
				return fmt.Sprintf("character %U not allowed by ZooKeeper", r)
			}
		}
	}
	return ""
}

// pathRuneOK mirrors org.apache.zookeeper.common.PathUtils (on UTF-16 code
// units: runes beyond U+FFFF become surrogates, which it rejects) and
// go-zookeeper's validatePath.
func pathRuneOK(r rune) bool {
	switch {
	case r <= 0x1f, r >= 0x7f && r <= 0x9f:
		return false
	case r >= 0xd800 && r <= 0xf8ff, r >= 0xfff0:
		return false
	}
	return true
}
