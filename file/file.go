package file

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

func init() { backend.Register("file", open) }

// Option configures New. Every value is checked when the Locker is made.
type Option func(*config)

type config struct {
	defaults []distlock.Option
	mkdir    bool
	hooks    *testHooks
}

// WithDefaults sets options applied to every acquisition of the Locker,
// such as distlock.WithMetadata. New refuses unusable ones
// (distlock.CheckOptions) with the error an acquisition would return.
func WithDefaults(opts ...distlock.Option) Option {
	return func(c *config) { c.defaults = append(c.defaults, opts...) }
}

// WithCreateDir makes New create the lock directory (and its parents,
// mode 0755 before the umask) when it does not exist; without it a missing
// directory is an error wrapping distlock.ErrUnavailable.
func WithCreateDir() Option { return func(c *config) { c.mkdir = true } }

// New returns a Locker whose locks are files in dir, which may be relative
// to the working directory. It checks that dir is a writable directory on
// a local filesystem: a missing directory wraps distlock.ErrUnavailable
// (it may be mounted later); a file, an unwritable directory, an option
// value and a network filesystem (*UnsafeFSError) wrap
// distlock.ErrInvalidOption; an unsupported operating system returns an
// *UnsupportedError. Every Locker on the same directory, in this process
// or any other on the host, contends for the same locks.
func New(dir string, opts ...Option) (*distlock.Locker, error) {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if err := distlock.CheckOptions(c.defaults...); err != nil {
		return nil, fmt.Errorf("file: WithDefaults: %w", err)
	}
	d, err := newDriver(dir, &c)
	if err != nil {
		return nil, err
	}
	return distlock.New(d, "file", c.defaults...), nil
}

// Dir is a Locker's lock directory; a *Dir target of
// (*distlock.Locker).As gets it.
type Dir struct{ d *driver }

// Path returns the absolute path of the lock directory.
func (dir Dir) Path() string { return dir.d.dir }

// As answers (*distlock.Locker).As: *Dir gets the Locker's directory.
func (d *driver) As(target any) bool {
	if t, ok := target.(**driver); ok { // for this package's tests
		*t = d
		return true
	}
	if t, ok := target.(*Dir); ok {
		*t = Dir{d}
		return true
	}
	return false
}

// HolderInfo is Inspect's answer with what only this backend knows of the
// holder: its process id, host name and the time its tenure began.
type HolderInfo struct {
	distlock.LockInfo
	PID   int
	Host  string
	Since time.Time
}

// Holder reads the lock named key without taking it, as Locker.Inspect
// does, and adds the holder's process id, host and start time as the
// holder recorded them. A key that is not locked gives Held false.
func (dir Dir) Holder(ctx context.Context, key string) (HolderInfo, error) {
	if err := distlock.ValidateKey(key); err != nil {
		return HolderInfo{}, err
	}
	return dir.d.holder(ctx, key)
}

// open is the URL opener: file:///absolute/dir, or file:relative/dir
// (relative to the working directory), with the parameter mkdir=true
// (WithCreateDir).
func open(_ context.Context, u *url.URL) (backend.Driver, error) {
	dir, err := urlDir(u)
	if err != nil {
		return nil, err
	}
	p := backend.NewParams(u)
	mkdir := backend.Parse(p, "mkdir", false, strconv.ParseBool)
	if err := p.Done(); err != nil {
		return nil, err
	}
	d, err := newDriver(dir, &config{mkdir: mkdir})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// urlDir returns the directory a file URL names.
func urlDir(u *url.URL) (string, error) {
	const want = "want file:///absolute/dir or file:relative/dir"
	switch {
	case u.User != nil:
		return "", fmt.Errorf("%w: file URL has user info; %s", backend.ErrInvalidOption, want)
	case u.Host != "":
		return "", fmt.Errorf("%w: file URL has host %q: locks on files exclude processes of one host only; %s", backend.ErrInvalidOption, u.Host, want)
	case u.Fragment != "" || strings.HasSuffix(u.String(), "#"):
		return "", fmt.Errorf("%w: file URL has a fragment; %s", backend.ErrInvalidOption, want)
	case u.Opaque != "":
		dir, err := url.PathUnescape(u.Opaque)
		if err != nil {
			return "", fmt.Errorf("%w: file URL path: %v", backend.ErrInvalidOption, err)
		}
		return dir, nil
	case u.Path == "":
		return "", fmt.Errorf("%w: file URL names no directory; %s", backend.ErrInvalidOption, want)
	}
	return u.Path, nil
}
