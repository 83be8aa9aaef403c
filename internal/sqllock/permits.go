package sqllock

import (
	"context"
	"fmt"
	"sync"

	"github.com/distlock/distlock/backend"
)

// PermitSuffix names a SQL driver's permit table (semaphores) after its
// lock table.
const PermitSuffix = "_permits"

// PermitSQL is a driver's dialect of its permit table: the statements that
// Permits runs, in the order and transactions that make a semaphore's
// guarantees. A semaphore is its own row (the empty permit id: its count
// and its fence) and one row per permit (a 16-byte id, an expiry by the
// database clock).
type PermitSQL interface {
	// Key is the semaphore key as the table stores it.
	Key(key string) []byte
	// Create creates the permit table if it does not exist.
	Create(ctx context.Context) error
	// Begin starts the transaction of one acquisition.
	Begin(ctx context.Context) (PermitTx, error)
	// Refresh extends the unexpired permit id of key to at least ttlUS µs
	// from now by the database clock: held is false when no such permit
	// matched.
	Refresh(ctx context.Context, key, id []byte, ttlUS int64) (held bool, err error)
	// Release deletes the unexpired permit id of key: held is false when
	// no such permit matched.
	Release(ctx context.Context, key, id []byte) (held bool, err error)
	// Abandon deletes the permit id of key, expired or not: done is true
	// when it deleted it.
	Abandon(ctx context.Context, key, id []byte) (done bool, err error)
	// Rejected reports whether err is the server's answer (the statement
	// certainly took nothing) or a request certainly never sent.
	Rejected(err error) bool
	// Failed is the error the driver returns for err from a call to the
	// server (Failed with the driver's hints).
	Failed(ctx context.Context, err error) error
}

// PermitTx is the transaction of one acquisition: the semaphore's own row
// stays locked from Count to its end, so acquisitions of one key run one at
// a time.
type PermitTx interface {
	// Count locks the semaphore's own row of key (made with the count
	// permits if there is none), deletes its expired permits, and returns
	// the count its row records (have), its live permits, and the µs until
	// the first of them expires (0 with none).
	Count(ctx context.Context, key []byte, permits int) (have int, live, firstUS int64, err error)
	// Grant raises the semaphore's fence, records permits as its count,
	// inserts permit id expiring ttlUS µs from now by the database clock,
	// and returns the fence raised: the permit's token.
	Grant(ctx context.Context, key, id []byte, permits int, ttlUS int64) (fence uint64, err error)
	// Commit commits the transaction.
	Commit(ctx context.Context) error
	// Rollback ends the transaction unless it was committed; ctx does not
	// end with the caller's.
	Rollback(ctx context.Context)
}

// Permits is a SQL driver's permit table (semaphores): its name derived
// from the lock table's and checked on first use, its statements made
// once (PermitSQL), the table created once when the driver creates its
// tables. Acquisitions, refreshes and releases of permits run here; the
// driver keeps only its dialect. Safe for concurrent use.
type Permits struct {
	dialect Dialect
	base    *Base
	ready   func(ctx context.Context) error
	build   func(quoted string) PermitSQL

	once sync.Once
	err  error
	sql  PermitSQL

	mu      sync.Mutex
	created bool
}

// NewPermits returns the permit table of a driver on base (whose lock table
// names it), in dialect d: ready sets up the lock table (Base.Ready) before
// the permit table is used; build makes the driver's statements on the
// permit table (quoted).
func NewPermits(d Dialect, base *Base, ready func(ctx context.Context) error, build func(quoted string) PermitSQL) *Permits {
	return &Permits{dialect: d, base: base, ready: ready, build: build}
}

// open derives the permit table once (an error wrapping ErrInvalidOption
// when its name is not valid: too long), sets up the lock table, and
// creates the permit table until that succeeds once, when the driver
// creates its tables.
func (p *Permits) open(ctx context.Context) error {
	p.once.Do(func() {
		name := p.base.Name + PermitSuffix
		if err := p.dialect.Check(name); err != nil {
			p.err = fmt.Errorf("%w: the permit table's name %q (the lock table's with %q): %v; use a shorter table name", backend.ErrInvalidOption, name, PermitSuffix, err)
			return
		}
		p.sql = p.build(p.dialect.QuoteTable(name))
	})
	if p.err != nil {
		return p.err
	}
	if err := p.ready(ctx); err != nil {
		return err
	}
	if !p.base.Create {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.created {
		return nil
	}
	if err := p.sql.Create(ctx); err != nil {
		return fmt.Errorf("create permit table: %w", err)
	}
	p.created = true
	return nil
}

// Capabilities are the guarantees of a SQL driver's permits: Fencing,
// Expiring, Durable.
func (p *Permits) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Expiring: true, Durable: true}
}
