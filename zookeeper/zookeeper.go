package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

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

// New returns a Locker over an existing connection, which stays the
// caller's: Close does not close it. If the session is lost, its leases end
// and go-zookeeper's own reconnect establishes a new session that later
// acquisitions use; nodes of the lost session are deleted in the background
// if the session turns out to be alive.
//
// The negotiated session timeout is needed to declare leases lost in time:
// it is known for connections made by Connect; for others pass
// WithSessionTimeout. WithDialer, WithLogger have no effect here.
//
// New checks every option value, and that conn is not nil and its session
// timeout is known: otherwise it returns an error wrapping
// distlock.ErrInvalidOption. It does not wait for the connection.
func New(conn *zk.Conn, opts ...Option) (*distlock.Locker, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: zookeeper: New: nil *zk.Conn", backend.ErrInvalidOption)
	}
	return newLocker(conn, nil, opts)
}

// Dial returns a Locker on the ensemble servers ("host:port") with its own
// connection, which it owns: when a session is lost it closes that
// connection and opens a new one (a new session) for later acquisitions,
// and Close closes it. Dial does not wait for the connection; acquisitions
// do (bounded by WithConnectTimeout). Like New, it checks every option
// value (ErrInvalidOption).
func Dial(servers []string, opts ...Option) (*distlock.Locker, error) {
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: no ZooKeeper server given", backend.ErrInvalidOption)
	}
	return newLocker(nil, servers, opts)
}

// newLocker is New and Dial: the driver over conn, or over its own
// connection to servers when conn is nil.
func newLocker(conn *zk.Conn, servers []string, opts []Option) (*distlock.Locker, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	d, err := newDriver(cfg, conn, servers)
	if err != nil {
		return nil, err
	}
	return distlock.New(d, "zookeeper", cfg.defaults...), nil
}

// Connect is zk.Connect with a dialer that reads the negotiated session
// timeout and session expiry from the wire, for use with New. It honours
// WithSessionTimeout, WithDialer and WithLogger, and checks every option
// value (ErrInvalidOption). The caller owns the connection.
func Connect(servers []string, opts ...Option) (*zk.Conn, <-chan zk.Event, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, nil, err
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

// open is the URL opener of "zookeeper" and "zk" (the form is in the
// package doc). It builds the Options of Dial from the URL and goes through the same
// checks (newConfig, newDriver).
func open(_ context.Context, u *url.URL) (backend.Driver, error) {
	servers, err := urlServers(u)
	if err != nil {
		return nil, err
	}
	opts, err := urlOptions(u)
	if err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return newDriver(cfg, nil, servers)
}

// urlServers checks the form of a zookeeper:// URL and returns its hosts.
func urlServers(u *url.URL) ([]string, error) {
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
	return servers, nil
}

// urlOptions returns the Options that the URL's path and parameters stand
// for, after the range checks of the parameters.
func urlOptions(u *url.URL) ([]Option, error) {
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
	if margin > 0 && margin >= st/2 {
		return nil, fmt.Errorf("%w: session_margin %v must be less than half the session timeout %v", backend.ErrInvalidOption, margin, st)
	}
	opts := []Option{WithBasePath(base), WithSessionTimeout(st), WithSessionMargin(margin), WithLossPolicy(policy)}
	if cw > 0 {
		opts = append(opts, WithConnectTimeout(cw))
	}
	if logOn {
		opts = append(opts, WithLogger(zk.DefaultLogger))
	}
	return opts, nil
}
