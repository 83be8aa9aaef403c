package backend

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// OpenFunc opens a driver from a parsed URL. It must reject URL parameters it
// does not know (Params.Done does that) and must not leave connections open
// when it returns an error.
type OpenFunc func(ctx context.Context, u *url.URL) (Driver, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]OpenFunc{}
	inProcess  = map[string]bool{}
)

// Register makes a backend available under a URL scheme (lower case). It is
// meant to be called from a backend package's init function. Register panics
// if open is nil or if the scheme is already registered, as
// database/sql.Register does.
func Register(scheme string, open OpenFunc) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if open == nil {
		panic("distlock/backend: Register open func is nil for scheme " + scheme)
	}
	if scheme == "" || scheme != strings.ToLower(scheme) {
		panic("distlock/backend: Register scheme must be non-empty lower case: " + scheme)
	}
	if _, dup := registry[scheme]; dup {
		panic("distlock/backend: Register called twice for scheme " + scheme)
	}
	registry[scheme] = open
}

// RegisterInProcess is Register for a backend whose locks exclude only
// within one process (mem://): tools that coordinate processes, such as
// `distlock run`, refuse such a scheme (see InProcess).
func RegisterInProcess(scheme string, open OpenFunc) {
	Register(scheme, open)
	registryMu.Lock()
	inProcess[scheme] = true
	registryMu.Unlock()
}

// InProcess reports whether scheme was registered with RegisterInProcess.
func InProcess(scheme string) bool {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return inProcess[strings.ToLower(scheme)]
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	s := make([]string, 0, len(registry))
	for k := range registry {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// packageOf names the distlock package that registers each built-in scheme,
// for the hint in Lookup's error.
var packageOf = map[string]string{
	"redis":           "redis",
	"rediss":          "redis",
	"redis+cluster":   "redis",
	"rediss+cluster":  "redis",
	"redis+sentinel":  "redis",
	"rediss+sentinel": "redis",
	"redlock":         "redlock",
	"zookeeper":       "zookeeper",
	"zk":              "zookeeper",
	"memcached":       "memcached",
	"mysql":           "mysql",
	"postgres":        "postgres",
	"postgresql":      "postgres",
	"mem":             "memory",
	"etcd":            "etcd",
	"etcds":           "etcd",
	"file":            "file",
}

// ImportPath returns the import path of the distlock package that registers
// scheme, "" for a scheme none of distlock's own packages registers. An
// unknown scheme's error names it.
func ImportPath(scheme string) string {
	if pkg, ok := packageOf[strings.ToLower(scheme)]; ok {
		return "github.com/distlock/distlock/" + pkg
	}
	return ""
}

// Lookup returns the OpenFunc registered for scheme. The error for an
// unknown scheme lists the registered ones and names the import that
// registers the scheme, when it is one of distlock's own.
func Lookup(scheme string) (OpenFunc, error) {
	scheme = strings.ToLower(scheme)
	registryMu.RLock()
	open, ok := registry[scheme]
	registryMu.RUnlock()
	if ok {
		return open, nil
	}
	known := Schemes()
	msg := fmt.Sprintf("unknown backend scheme %q (registered: %s)", scheme, strings.Join(known, ", "))
	if len(known) == 0 {
		msg = fmt.Sprintf("unknown backend scheme %q (no backend is registered)", scheme)
	}
	if path := ImportPath(scheme); path != "" {
		msg += fmt.Sprintf(`; forgotten import _ %q?`, path)
	}
	return nil, fmt.Errorf("%w: %s", ErrInvalidOption, msg)
}

// Params reads a URL's query parameters and remembers which were read, so
// that Done can reject the ones a backend does not know.
type Params struct {
	v    url.Values
	used map[string]bool
	errs []string
}

// NewParams wraps u's query parameters.
func NewParams(u *url.URL) *Params {
	return &Params{v: u.Query(), used: map[string]bool{}}
}

// String returns the value of name, or def when absent.
func (p *Params) String(name, def string) string {
	p.used[name] = true
	if vs, ok := p.v[name]; ok && len(vs) > 0 {
		if len(vs) > 1 {
			p.errs = append(p.errs, fmt.Sprintf("parameter %q given %d times", name, len(vs)))
		}
		return vs[0]
	}
	return def
}

// Has reports whether name is present.
func (p *Params) Has(name string) bool { _, ok := p.v[name]; return ok }

// Parse reads name with conv; a conversion error is recorded for Done.
func Parse[T any](p *Params, name string, def T, conv func(string) (T, error)) T {
	if !p.Has(name) {
		p.used[name] = true
		return def
	}
	s := p.String(name, "")
	v, err := conv(s)
	if err != nil {
		p.errs = append(p.errs, fmt.Sprintf("parameter %s=%q: %v", name, s, err))
		return def
	}
	return v
}

// Done returns an error wrapping ErrInvalidOption if a parameter was not
// read, or could not be parsed. The message lists the unknown names and the
// known ones.
func (p *Params) Done() error {
	var unknown []string
	for k := range p.v {
		if !p.used[k] {
			unknown = append(unknown, strconv.Quote(k))
		}
	}
	sort.Strings(unknown)
	errs := slices.Clone(p.errs)
	if len(unknown) > 0 {
		var known []string
		for k := range p.used {
			known = append(known, k)
		}
		sort.Strings(known)
		hint := "none"
		if len(known) > 0 {
			hint = strings.Join(known, ", ")
		}
		errs = append(errs, fmt.Sprintf("unknown parameter(s) %s (known: %s)", strings.Join(unknown, ", "), hint))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidOption, strings.Join(errs, "; "))
}

// PositiveDuration parses a Go duration ("250ms") that must be greater
// than zero; a converter for Parse.
func PositiveDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil && d <= 0 {
		err = errors.New("must be positive")
	}
	return d, err
}

// NonNegativeDuration parses a Go duration that may be zero but not
// negative; a converter for Parse.
func NonNegativeDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil && d < 0 {
		err = errors.New("must not be negative")
	}
	return d, err
}

// PositiveInt parses a decimal integer greater than zero; a converter for
// Parse.
func PositiveInt(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err == nil && n <= 0 {
		err = errors.New("must be positive")
	}
	return n, err
}

// DurationIn returns a converter for Parse that accepts a Go duration in
// [lo, hi]: every duration parameter of a URL has a range, so that no value
// overflows later arithmetic.
func DurationIn(lo, hi time.Duration) func(string) (time.Duration, error) {
	return func(s string) (time.Duration, error) {
		d, err := time.ParseDuration(s)
		if err == nil && (d < lo || d > hi) {
			err = fmt.Errorf("out of range [%v, %v]", lo, hi)
		}
		return d, err
	}
}

// IntIn returns a converter for Parse that accepts a decimal integer in
// [lo, hi].
func IntIn(lo, hi int) func(string) (int, error) {
	return func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, errors.New("not a decimal integer")
		}
		if n < lo || n > hi {
			return n, fmt.Errorf("out of range [%d, %d]", lo, hi)
		}
		return n, nil
	}
}

// Rename accepts the deprecated spelling old of parameter name (URL
// parameters are snake_case; a few backends first used camelCase): a value
// given as old is read as name. Giving both is an error reported by Done.
func (p *Params) Rename(old, name string) {
	vs, ok := p.v[old]
	if !ok {
		return
	}
	if _, both := p.v[name]; both {
		p.used[old] = true
		p.errs = append(p.errs, fmt.Sprintf("parameter %s given twice (also as its deprecated spelling %s)", name, old))
		return
	}
	p.v[name] = vs
	delete(p.v, old)
}
