package sqllock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/internal/async"
)

// Base is what every mode of a SQL driver shares: the lock table, the
// schema set up once, and background work that Close bounds.
type Base struct {
	Table  string // quoted
	Name   string // unquoted
	Create bool   // the driver creates the table on first use
	Mode   string
	// Cleanup is the policy of the background deletion of free rows.
	Cleanup Cleanup
	// CreateSQL is the CREATE TABLE IF NOT EXISTS statement of the
	// mode's table.
	CreateSQL string

	// Now is the client's wall clock: the driver reads it (for its own
	// bookkeeping of pinned connections) through Now alone. No statement
	// carries it — expiries and takeovers are the server's clock — which
	// tests prove by shifting it for row mode.
	Now func() time.Time

	// UndoSchedule spaces the tries of Undo (default: 0, 250ms, 1.25s,
	// 3.25s, 7.25s from the first); set before the driver is used.
	UndoSchedule async.At

	closeDB func() error // closes a database the driver owns; nil if not

	schemaMu sync.Mutex
	schemaOK atomic.Bool

	cleanupStarted atomic.Bool

	group *async.Group
	life  context.Context // cancelled by Close; bounds background work
	stop  context.CancelFunc
}

// NewBase returns the Base of a driver configured by c (checked by Apply),
// on table d quotes, with the mode's schema. closeDB, if not nil, closes a
// database the driver owns (URL-opened); Close calls it last.
func NewBase(d Dialect, schemas []Schema, c *Config, closeDB func() error) *Base {
	b := &Base{Table: d.QuoteTable(c.Table), Name: c.Table, Create: c.CreateTable, Mode: c.Mode, Cleanup: c.Cleanup, Now: time.Now, UndoSchedule: undoSchedule, closeDB: closeDB, group: async.NewGroup()}
	if s, ok := schemaOf(schemas, c.Mode); ok {
		b.CreateSQL = s.DDL(b.Table)
	}
	b.life, b.stop = context.WithCancel(context.Background())
	return b
}

// Ready returns async.CtxError once ctx has ended; else it runs setup
// (create the table, check its shape) until that succeeds once, concurrent
// callers waiting for the one running it.
func (b *Base) Ready(ctx context.Context, setup func(ctx context.Context) error) error {
	if ctx.Err() != nil {
		return async.CtxError(ctx)
	}
	if b.schemaOK.Load() {
		return nil
	}
	b.schemaMu.Lock()
	defer b.schemaMu.Unlock()
	if b.schemaOK.Load() {
		return nil
	}
	if err := setup(ctx); err != nil {
		return err
	}
	b.schemaOK.Store(true)
	return nil
}

// Go runs f on a goroutine that Close waits for, with a ctx that Close
// cancels. It reports false (and does not run f) once Close has begun.
func (b *Base) Go(f func(life context.Context)) bool {
	return b.group.Go(func() { f(b.life) })
}

// Life is cancelled when Close begins.
func (b *Base) Life() context.Context { return b.life }

// undoSchedule spaces the tries to give back an orphan hold, from the
// first: the lost request may still be on its way to the server, so one
// early try is not enough (pauses of 0, 250ms, 1s, 2s and 4s).
var undoSchedule = async.At{0, 250 * time.Millisecond, 1250 * time.Millisecond, 3250 * time.Millisecond, 7250 * time.Millisecond}

// undoTryTimeout bounds each try of an undo.
const undoTryTimeout = 5 * time.Second

// Undo gives back, in the background, what an acquisition whose reply was
// lost may have taken: try runs on the schedule (0, 250ms, 1.25s, 3.25s,
// 7.25s from the first) until it reports that it gave the hold back (done),
// or the TTL has passed (the row is free by then anyway). try reports err
// when it got no answer from the server. Close does not cut the schedule
// short while the server answers — the lost request may still be on its
// way, and a last try before it lands would leave its hold for the whole
// TTL — but once Close has begun the first unanswered try ends it. try
// must be idempotent and match only that acquisition's own hold.
func (b *Base) Undo(ttl time.Duration, try func(ctx context.Context) (done bool, err error)) {
	b.group.Go(func() {
		async.Retry{Schedule: b.UndoSchedule, Within: ttl, TryTimeout: undoTryTimeout}.Do(context.Background(), func(ctx context.Context) bool {
			done, err := try(ctx)
			return done || err != nil && b.life.Err() != nil
		})
	})
}

// Shutdown stops background work, waits for it, and closes an owned
// database.
func (b *Base) Shutdown() error {
	b.stop()
	b.group.Close()
	if b.closeDB != nil {
		return b.closeDB()
	}
	return nil
}
