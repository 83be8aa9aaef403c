package sqllock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock/backend"
)

// PermitSuffix names a SQL driver's permit table (semaphores) after its
// lock table.
const PermitSuffix = "_permits"

// Permits is a SQL driver's permit table: its name derived from the lock
// table's and checked once, its statements made once, the table created
// once when the driver creates its tables. The zero value is ready to use.
type Permits struct {
	once  sync.Once
	err   error
	Table string // quoted

	mu      sync.Mutex
	created bool
}

// Init derives the permit table from the lock table name (unquoted) once,
// and calls build with its quoted name to make the statements. Its error
// wraps ErrInvalidOption when the derived name is not valid (too long).
func (p *Permits) Init(d Dialect, lockTable string, build func(quoted string)) error {
	p.once.Do(func() {
		name := lockTable + PermitSuffix
		if err := d.Check(name); err != nil {
			p.err = fmt.Errorf("%w: the permit table's name %q (the lock table's with %q): %v; use a shorter table name", backend.ErrInvalidOption, name, PermitSuffix, err)
			return
		}
		p.Table = d.QuoteTable(name)
		build(p.Table)
	})
	return p.err
}

// Ready runs create (the CREATE TABLE IF NOT EXISTS) once it succeeds, when
// the driver creates its tables; else it does nothing.
func (p *Permits) Ready(ctx context.Context, createTables bool, create func(ctx context.Context) error) error {
	if !createTables {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.created {
		return nil
	}
	if err := create(ctx); err != nil {
		return fmt.Errorf("create permit table: %w", err)
	}
	p.created = true
	return nil
}

// Admit decides an acquisition of one of want permits, made while the
// semaphore's own row is locked: live permits are held now, with the count
// have, the first of them expiring in firstUS µs. nil: grant a permit.
func Admit(live int64, have, want int, firstUS int64) error {
	switch {
	case live > 0 && have != want:
		return &backend.PermitsError{Have: have, Want: want}
	case live >= int64(want):
		return backend.Busy(time.Duration(firstUS) * time.Microsecond)
	}
	return nil
}

// ErrPermitNotHeld is the error of Refresh and Release of a permit that has
// expired or was given back.
var ErrPermitNotHeld = fmt.Errorf("%w: the permit has expired or was given back", backend.ErrNotHeld)

// Refused reports whether err, from an acquisition of a permit of key, is
// an answer that took nothing (Admit's: another count, which it then names
// key in, or every permit held), to be returned as it is.
func Refused(err error, key string) bool {
	var pe *backend.PermitsError
	if errors.As(err, &pe) {
		pe.Key = key
		return true
	}
	return errors.Is(err, backend.ErrNotAcquired)
}
