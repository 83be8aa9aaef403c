package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

func init() {
	backend.Register("zookeeper", open)
	backend.Register("zk", open)
}

// Defaults.
const (
	// DefaultBasePath is the node under which lock nodes live when neither
	// the URL path nor WithBasePath names one.
	DefaultBasePath = "/distlock"
	// DefaultSessionTimeout is the session timeout Dial and the URL opener
	// ask for. The server clamps it to [2, 20] × tickTime by default; the
	// negotiated value is read back and used.
	DefaultSessionTimeout = 10 * time.Second
	// DefaultPort is used for URL hosts without a port.
	DefaultPort = "2181"
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
	err            error
}

// Option configures a Locker (Dial, New) or a connection (Connect).
type Option func(*config)

// WithDefaults sets options applied to every acquisition of the Locker (they
// are passed to distlock.New).
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
// bound of it), or every acquisition fails with ErrInvalidOption.
func WithSessionTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.err = fmt.Errorf("%w: session timeout %v is not positive", backend.ErrInvalidOption, d)
			return
		}
		c.sessionTimeout = d
	}
}

// WithSessionMargin sets how long before the session could expire on the
// server the leases of an unreachable session are declared lost: at last
// contact + negotiated timeout − margin. The default is a tenth of the
// negotiated timeout, at least 100ms. The margin absorbs scheduling delays
// of this process and the ensemble's internal delay (about one tickTime)
// between a server hearing from the client and the leader noting it. A
// margin of half the negotiated timeout or more is cut to half (the URL
// parameter session_margin is refused then).
func WithSessionMargin(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.err = fmt.Errorf("%w: session margin %v is negative", backend.ErrInvalidOption, d)
			return
		}
		c.margin = d
	}
}

// WithLossPolicy sets when leases are declared lost during a disconnect
// (default LoseOnSessionTimeout).
func WithLossPolicy(p LossPolicy) Option {
	return func(c *config) {
		if p != LoseOnSessionTimeout && p != LoseOnDisconnect {
			c.err = fmt.Errorf("%w: unknown loss policy %d", backend.ErrInvalidOption, int(p))
			return
		}
		c.policy = p
	}
}

// WithACL sets the ACL of the nodes the Locker creates (default
// zk.WorldACL(zk.PermAll)).
func WithACL(acl []zk.ACL) Option {
	return func(c *config) {
		if len(acl) == 0 {
			c.err = fmt.Errorf("%w: empty ACL", backend.ErrInvalidOption)
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
// ErrUnavailable. The default is the negotiated session timeout.
func WithConnectTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.err = fmt.Errorf("%w: connect timeout %v is not positive", backend.ErrInvalidOption, d)
			return
		}
		c.connectWait = d
	}
}

// DiscardLogger is a zk.Logger that drops every message.
var DiscardLogger zk.Logger = log.New(io.Discard, "", 0)

func newConfig(opts []Option) *config {
	c := &config{basePath: DefaultBasePath, acl: zk.WorldACL(zk.PermAll)}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if c.err == nil {
		c.err = validateBasePath(c.basePath)
	}
	return c
}

// Locker is a distlock.Locker on ZooKeeper. Its methods are safe for
// concurrent use.
type Locker struct {
	distlock.Locker
	d *driver
}

// Dial returns a Locker on the ensemble servers ("host:port") with its own
// connection, which it owns: when a session is lost it closes that
// connection and opens a new one (a new session) for later acquisitions,
// and Close closes it. Dial does not wait for the connection; acquisitions
// do (bounded by WithConnectTimeout).
func Dial(servers []string, opts ...Option) (*Locker, error) {
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: no ZooKeeper server given", backend.ErrInvalidOption)
	}
	cfg := newConfig(opts)
	if cfg.err != nil {
		return nil, cfg.err
	}
	d, err := newOwnedDriver(servers, cfg)
	if err != nil {
		return nil, err
	}
	return &Locker{Locker: distlock.New(d, "zookeeper", cfg.defaults...), d: d}, nil
}

// New returns a Locker over an existing connection, which stays the
// caller's: Close does not close it. If the session is lost, its leases end
// and go-zookeeper's own reconnect establishes a new session that later
// acquisitions use; nodes of the lost session are deleted in the background
// if the session turns out to be alive.
//
// The negotiated session timeout is needed to declare leases lost in time:
// it is known for connections made by Connect; for others pass
// WithSessionTimeout. WithDialer, WithLogger have no effect here.
func New(conn *zk.Conn, opts ...Option) *Locker {
	cfg := newConfig(opts)
	if conn == nil && cfg.err == nil {
		cfg.err = fmt.Errorf("%w: nil *zk.Conn", backend.ErrInvalidOption)
	}
	info := lookupInfo(conn)
	if info == nil && cfg.err == nil && cfg.sessionTimeout == 0 {
		cfg.err = fmt.Errorf("%w: the session timeout of a *zk.Conn not made by zookeeper.Connect cannot be read back: pass WithSessionTimeout", backend.ErrInvalidOption)
	}
	d := newDriver(cfg, nil)
	if conn != nil {
		d.conn, d.info = conn, info
	}
	d.run()
	return &Locker{Locker: distlock.New(d, "zookeeper", cfg.defaults...), d: d}
}

// Connect is zk.Connect with a dialer that reads the negotiated session
// timeout and session expiry from the wire, for use with New. It honours
// WithSessionTimeout, WithDialer and WithLogger. The caller owns the
// connection.
func Connect(servers []string, opts ...Option) (*zk.Conn, <-chan zk.Event, error) {
	cfg := newConfig(opts)
	if cfg.err != nil {
		return nil, nil, cfg.err
	}
	conn, events, info, err := connect(servers, cfg)
	if err != nil {
		return nil, nil, err
	}
	register(conn, info)
	return conn, events, nil
}

func connect(servers []string, cfg *config) (*zk.Conn, <-chan zk.Event, *connInfo, error) {
	if len(servers) == 0 {
		return nil, nil, nil, fmt.Errorf("%w: no ZooKeeper server given", backend.ErrInvalidOption)
	}
	timeout := cfg.sessionTimeout
	if timeout == 0 {
		timeout = DefaultSessionTimeout
	}
	info := newConnInfo()
	logger := cfg.logger
	if logger == nil {
		logger = DiscardLogger
	}
	conn, events, err := zk.Connect(servers, timeout,
		zk.WithDialer(info.dialer(cfg.dialer)), zk.WithLogger(logger), zk.WithLogInfo(false))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	return conn, events, info, nil
}

// SessionTimeout returns the negotiated timeout of the current session, 0
// before a session is established.
func (l *Locker) SessionTimeout() time.Duration {
	if s := l.d.current(); s != nil {
		return s.timeout
	}
	return 0
}

// SessionID returns the id of the current session, 0 before a session is
// established.
func (l *Locker) SessionID() int64 {
	if s := l.d.current(); s != nil {
		return s.id
	}
	return 0
}

// open is the URL opener:
// zookeeper://h1:2181,h2:2181/base/path?session_timeout=10s&session_margin=1s&loss_policy=session_timeout&connect_timeout=10s&log=true
func open(_ context.Context, u *url.URL) (backend.Driver, error) {
	if u.Opaque != "" {
		return nil, fmt.Errorf("%w: zookeeper URL must be zookeeper://host:port[,host:port...]/base/path, got %q", backend.ErrInvalidOption, u.Redacted())
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: zookeeper URL: credentials are not supported; use zookeeper.New with a *zk.Conn you authenticated", backend.ErrInvalidOption)
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("%w: zookeeper URL: unexpected fragment %q", backend.ErrInvalidOption, u.Fragment)
	}
	servers, err := backend.Hosts(u, DefaultPort)
	if err != nil {
		return nil, err
	}
	for _, h := range servers {
		port := h[strings.LastIndexByte(h, ':')+1:]
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%w: zookeeper URL: bad port in %q", backend.ErrInvalidOption, h)
		}
	}
	base := u.Path
	if base == "" || base == "/" {
		base = DefaultBasePath
	}
	p := backend.NewParams(u)
	st := backend.Parse(p, "session_timeout", DefaultSessionTimeout, backend.DurationIn(time.Millisecond, 24*time.Hour))
	margin := backend.Parse(p, "session_margin", time.Duration(0), backend.DurationIn(0, 12*time.Hour))
	policy := backend.Parse(p, "loss_policy", LoseOnSessionTimeout, func(s string) (LossPolicy, error) {
		switch strings.ToLower(s) {
		case "session_timeout", "session":
			return LoseOnSessionTimeout, nil
		case "disconnect":
			return LoseOnDisconnect, nil
		}
		return 0, errors.New(`want "session_timeout" or "disconnect"`)
	})
	cw := backend.Parse(p, "connect_timeout", time.Duration(0), backend.DurationIn(time.Millisecond, 24*time.Hour))
	logOn := backend.Parse(p, "log", false, strconv.ParseBool)
	if err := p.Done(); err != nil {
		return nil, err
	}
	opts := []Option{WithBasePath(base), WithSessionTimeout(st), WithSessionMargin(margin), WithLossPolicy(policy)}
	if cw > 0 {
		opts = append(opts, WithConnectTimeout(cw))
	}
	if logOn {
		opts = append(opts, WithLogger(zk.DefaultLogger))
	}
	cfg := newConfig(opts)
	if cfg.err != nil {
		return nil, cfg.err
	}
	if margin > 0 && margin >= st/2 {
		return nil, fmt.Errorf("%w: session_margin %v must be less than half the session timeout %v", backend.ErrInvalidOption, margin, st)
	}
	return newOwnedDriver(servers, cfg)
}

// validateBasePath accepts an absolute path that both go-zookeeper and the
// ZooKeeper server accept (the server rejects, among others, characters
// outside the Basic Multilingual Plane such as emoji, and U+D800–U+F8FF).
func validateBasePath(p string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: base path %q: %s", backend.ErrInvalidOption, p, why)
	}
	if !strings.HasPrefix(p, "/") {
		return bad("must start with /")
	}
	if p == "/" {
		return bad("must not be the root")
	}
	if strings.HasSuffix(p, "/") {
		return bad("must not end with /")
	}
	if !utf8.ValidString(p) {
		return bad("not valid UTF-8")
	}
	for i, comp := range strings.Split(p[1:], "/") {
		switch {
		case comp == "":
			return bad("empty component")
		case comp == "." || comp == "..":
			return bad("relative component")
		case i == 0 && comp == "zookeeper":
			return bad("/zookeeper is reserved for the server")
		}
		for _, r := range comp {
			if !pathRuneOK(r) {
				return bad(fmt.Sprintf("character %U not allowed by ZooKeeper", r))
			}
		}
	}
	return nil
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
