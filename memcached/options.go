package memcached

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

// Option configures New. The URL opener builds the same options from the
// URL's parameters, so both are checked by the same code.
type Option func(*config)

type config struct {
	defaults    []distlock.Option
	prefix      string
	selector    memcache.ServerSelector
	selectorSet bool // WithSelector given, maybe with nil
	release     ReleaseMode
	pin         PinMode
	closeClient bool
}

// WithDefaults sets options applied to every acquisition of the Locker
// (passed to distlock.New), such as distlock.WithTTL. distlock checks them
// at each acquisition, as it checks the options given to distlock.Open.
func WithDefaults(opts ...distlock.Option) Option {
	return func(c *config) { c.defaults = append(c.defaults, opts...) }
}

// WithPrefix sets the prefix of every memcached key the Locker uses
// (default DefaultPrefix). Lockers must use the same prefix to contend for
// the same locks. It must be at most 200 bytes without whitespace or control
// bytes; New refuses any other with ErrInvalidOption.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithSelector tells the Locker which ServerSelector the client was built
// with (memcache.NewFromSelector), so it can reach the server that holds a
// key on its own connections. That enables the meta-protocol
// compare-and-delete (ReleaseAuto) and the server-list guard (WithPin). It
// must be the client's own selector: the Locker assumes both pick the same
// server for a key. New refuses a nil one with ErrInvalidOption.
func WithSelector(ss memcache.ServerSelector) Option {
	return func(c *config) { c.selector, c.selectorSet = ss, true }
}

// WithRelease selects how the last hold of a lock is deleted (default
// ReleaseAuto). New refuses a value that is not a ReleaseMode constant
// with ErrInvalidOption.
func WithRelease(m ReleaseMode) Option {
	return func(c *config) { c.release = m }
}

// WithPin sets the server-list guard (default PinCheck). It needs
// WithSelector; without one there is no guard. New refuses a value that is
// not a PinMode constant with ErrInvalidOption.
func WithPin(m PinMode) Option {
	return func(c *config) { c.pin = m }
}

// WithCloseClient makes Close close the client's idle connections. By
// default New does not take ownership of the caller's client.
func WithCloseClient() Option {
	return func(c *config) { c.closeClient = true }
}

// newConfig applies opts to the defaults and checks every value: an error
// wraps ErrInvalidOption and names the option and its value, on one line.
func newConfig(opts []Option) (config, error) {
	cfg := config{prefix: DefaultPrefix}
	for i, o := range opts {
		if o == nil {
			return cfg, fmt.Errorf("%w: memcached: option %d is nil", backend.ErrInvalidOption, i)
		}
		o(&cfg)
	}
	return cfg, cfg.check()
}

func (c *config) check() error {
	bad := func(option string, value any, why string) error {
		return fmt.Errorf("%w: memcached: %s(%v): %s", backend.ErrInvalidOption, option, value, why)
	}
	if err := distlock.CheckOptions(c.defaults...); err != nil {
		return fmt.Errorf("memcached: WithDefaults: %w", err)
	}
	if err := checkPrefix(c.prefix); err != nil {
		return bad("WithPrefix", fmt.Sprintf("%q", c.prefix), err.Error())
	}
	if c.selectorSet && (c.selector == nil || isNilServerList(c.selector)) {
		return bad("WithSelector", "nil", "want the client's selector")
	}
	if !c.release.valid() {
		return bad("WithRelease", int(c.release), "want ReleaseAuto or ReleaseCAS")
	}
	if !c.pin.valid() {
		return bad("WithPin", int(c.pin), "want PinCheck, PinReset or PinOff")
	}
	return nil
}

// isNilServerList reports whether ss is a nil *memcache.ServerList, whose
// methods would panic.
func isNilServerList(ss memcache.ServerSelector) bool {
	sl, ok := ss.(*memcache.ServerList)
	return ok && sl == nil
}

// ReleaseMode selects how the last hold of a lock is deleted.
type ReleaseMode int

const (
	// ReleaseAuto deletes with the meta protocol's compare-and-delete
	// (md <key> C<cas>) where the Locker knows which server holds the key
	// (URL opener, or WithSelector) and the server speaks the meta
	// protocol (memcached 1.6+); otherwise as ReleaseCAS. The default.
	ReleaseAuto ReleaseMode = iota
	// ReleaseCAS replaces the item, by compare-and-swap, with an empty
	// tombstone whose expiry is in the past, so it is gone at once. It
	// needs no meta protocol, but the tombstone needs a free chunk, so with
	// -M and a full slab class it fails where md would succeed.
	ReleaseCAS
)

// PinMode selects the server-list guard (see the package documentation).
type PinMode int

const (
	// PinCheck records the Locker's server list on each server the first
	// time it takes a lock there, and refuses (ErrInvalidOption) to take
	// locks on a server that records a different list. The default.
	PinCheck PinMode = iota
	// PinReset overwrites the record with the Locker's server list. Use it
	// once, after every holder under the old list is gone, to change the
	// list on purpose.
	PinReset
	// PinOff skips the guard.
	PinOff
)

// The URL names of the modes, indexed by value.
var (
	releaseNames = []string{ReleaseAuto: "auto", ReleaseCAS: "cas"}
	pinNames     = []string{PinCheck: "check", PinReset: "reset", PinOff: "off"}
)

// String returns the mode's name in URLs: "auto" or "cas".
func (m ReleaseMode) String() string { return modeName(m, releaseNames) }

// String returns the mode's name in URLs: "check", "reset" or "off".
func (m PinMode) String() string { return modeName(m, pinNames) }

func (m ReleaseMode) valid() bool { return m >= 0 && int(m) < len(releaseNames) }
func (m PinMode) valid() bool     { return m >= 0 && int(m) < len(pinNames) }

func modeName[M ~int](m M, names []string) string {
	if m >= 0 && int(m) < len(names) {
		return names[m]
	}
	return fmt.Sprintf("%T(%d)", m, int(m))
}

// parseMode returns the URL parser of a mode type: its names, by value.
func parseMode[M ~int](names []string) func(string) (M, error) {
	return func(s string) (M, error) {
		if i := slices.Index(names, s); i >= 0 {
			return M(i), nil
		}
		last := len(names) - 1
		return 0, fmt.Errorf("want %s or %s", strings.Join(names[:last], ", "), names[last])
	}
}
