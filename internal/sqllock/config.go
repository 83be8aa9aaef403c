package sqllock

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

// Config is the configuration both SQL drivers accept; a driver's own
// config embeds it. The setters check their value and record the first
// invalid one in Err, which New and the URL opener return.
type Config struct {
	Backend     string // "mysql", "postgres": the prefix of option errors
	Mode        string
	Table       string // unquoted; "" until set or defaulted
	CreateTable bool
	Keepalive   time.Duration
	Defaults    []distlock.Option
	Cleanup     Cleanup // the background deletion of free rows (row modes, mysql forupdate)
	Err         error
}

// Fail records an invalid option value: an error wrapping
// backend.ErrInvalidOption that names the option and the value
// ("mysql: WithKeepalive(0s): must be positive"). The first one wins.
func (c *Config) Fail(option string, value any, why string) {
	if c.Err == nil {
		c.Err = fmt.Errorf("%w: %s: %s(%v): %s", backend.ErrInvalidOption, c.Backend, option, value, why)
	}
}

// SetMode sets the mode if it is one of modes.
func (c *Config) SetMode(m string, modes ...string) {
	for _, ok := range modes {
		if m == ok {
			c.Mode = m
			return
		}
	}
	c.Fail("WithMode", fmt.Sprintf("%q", m), "want "+quoteList(modes))
}

// SetTable sets the table name if d accepts it.
func (c *Config) SetTable(d Dialect, name string) {
	if err := d.Check(name); err != nil {
		c.Fail("WithTable", fmt.Sprintf("%q", name), err.Error())
		return
	}
	c.Table = name
}

// SetKeepalive sets the keepalive interval if it is positive.
func (c *Config) SetKeepalive(d time.Duration) {
	if d <= 0 {
		c.Fail("WithKeepalive", d, "must be positive")
		return
	}
	c.Keepalive = d
}

func quoteList(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, " or ")
}

// Dialect is how a server names tables: what one identifier may be, how it
// is quoted, and what qualifies it ("db.table", "schema.table").
type Dialect struct {
	Ident     *regexp.Regexp // one identifier, anchored
	IdentDesc string         // what Ident accepts, for errors
	Qualifier string         // "db", "schema"
	Quote     string         // the quote character
}

// Check reports why name is not a valid table name: an identifier,
// optionally qualified by one more.
func (d Dialect) Check(name string) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return fmt.Errorf("at most one '.' (%s.table)", d.Qualifier)
	}
	for _, p := range parts {
		if !d.Ident.MatchString(p) {
			return fmt.Errorf("want %s (optionally %s.table)", d.IdentDesc, d.Qualifier)
		}
	}
	return nil
}

// ValidTable is Check as an error wrapping backend.ErrInvalidOption.
func (d Dialect) ValidTable(name string) error {
	if err := d.Check(name); err != nil {
		return fmt.Errorf("%w: table name %q: %v", backend.ErrInvalidOption, name, err)
	}
	return nil
}

// QuoteTable quotes a valid table name; validation has excluded the quote
// character, so quoting cannot be escaped from.
func (d Dialect) QuoteTable(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = d.Quote + p + d.Quote
	}
	return strings.Join(parts, ".")
}

// Schema is one mode's table: its default name and its CREATE TABLE
// statement for a quoted name.
type Schema struct {
	Mode         string
	DefaultTable string
	DDL          func(quoted string) string
}

// DDL returns the CREATE TABLE statement of mode's table named table (""
// for the mode's default), or an error wrapping backend.ErrInvalidOption.
func (d Dialect) DDL(schemas []Schema, mode, table string) (string, error) {
	modes := make([]string, len(schemas))
	for i, s := range schemas {
		modes[i] = s.Mode
		if s.Mode != mode {
			continue
		}
		if table == "" {
			table = s.DefaultTable
		}
		if err := d.ValidTable(table); err != nil {
			return "", err
		}
		return s.DDL(d.QuoteTable(table)), nil
	}
	return "", fmt.Errorf("%w: mode %q (want %s)", backend.ErrInvalidOption, mode, quoteList(modes))
}

// Apply applies a driver's options to its config c, whose Config is base
// (with the driver's defaults set), skipping nil options; then the table
// defaults to the mode's. The error is the first invalid option's.
func Apply[C any, O ~func(*C)](c *C, base *Config, schemas []Schema, opts []O) error {
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if base.Table == "" {
		if s, ok := schemaOf(schemas, base.Mode); ok {
			base.Table = s.DefaultTable
		}
	}
	if base.Err == nil {
		if err := distlock.CheckOptions(base.Defaults...); err != nil {
			base.Err = fmt.Errorf("%s: WithDefaults: %w", base.Backend, err)
		}
	}
	return base.Err
}

func schemaOf(schemas []Schema, mode string) (Schema, bool) {
	for _, s := range schemas {
		if s.Mode == mode {
			return s, true
		}
	}
	return Schema{}, false
}

// TTLMicros converts a TTL to whole microseconds (the resolution of
// DATETIME(6) and timestamptz), rounding up: the server never holds a lock
// for less than its TTL.
func TTLMicros(ttl time.Duration) int64 {
	us := int64(ttl / time.Microsecond)
	if ttl%time.Microsecond != 0 {
		us++
	}
	return us
}

// Param reads an optional URL parameter (so that Params.Done knows it):
// its value and whether it was given.
func Param(p *backend.Params, name string) (string, bool) {
	has := p.Has(name)
	return p.String(name, ""), has
}

// CheckTTL refuses a TTL that is not positive with ErrInvalidTTL (a
// Refresh's: distlock has checked the acquisition's).
func CheckTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: %v", backend.ErrInvalidTTL, ttl)
	}
	return nil
}
