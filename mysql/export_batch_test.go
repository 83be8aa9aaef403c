package mysql

import (
	"database/sql"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// BatchDriver is a row-mode driver as distlock's scheduler sees it.
type BatchDriver interface {
	backend.Driver
	backend.BatchRefresher
}

// NewRowDriver returns a row-mode driver on db and table that names at most
// batchMax locks in one batched refresh statement (0: the default). Close
// leaves db open.
func NewRowDriver(db *sql.DB, table string, batchMax int) BatchDriver {
	c, err := newConfig([]Option{WithTable(table)})
	if err != nil {
		panic(err)
	}
	d := newDriver(db, nil, c).(*rowDriver)
	if batchMax > 0 {
		d.batchMax = batchMax
	}
	return d
}

// RefreshBatchSQL is the batched refresh statement of n locks on table.
func RefreshBatchSQL(table string, n int) string {
	return newRowDriver(&base{Base: &sqllock.Base{Table: dialect.QuoteTable(table)}}).refreshBatchSQL(n)
}

// RowBatchMax exposes rowBatchMax.
const RowBatchMax = rowBatchMax

// RowCycleSQL returns row mode's acquire and release statements on table,
// for benchmarks that send them in other shapes (multi-statements).
func RowCycleSQL(table string) (acquire, release string) {
	d := newRowDriver(&base{Base: &sqllock.Base{Table: dialect.QuoteTable(table)}})
	return d.qAcquire, d.qRelease
}

// RowAcquireArgs returns the arguments of the acquire statement for key,
// owner and ttl, with a fresh hold id, as TryAcquire sends them.
func RowAcquireArgs(key, owner string, ttl time.Duration) (args []any, hold []byte) {
	h := keyHash(key)
	o := []byte(owner)
	us := ttlMicros(ttl)
	hid := newHoldID()
	floor := floorHash(h)
	return []any{h[:], []byte(key), o, us, floor[:], hid[:], []byte(nil),
		o, o, o, hid[:], o, hid[:], []byte(nil), us, o, us}, hid[:]
}

// RowReleaseArgs returns the arguments of the release statement, as
// Release sends them.
func RowReleaseArgs(key, owner string, hold []byte, fence uint64) []any {
	h := keyHash(key)
	return []any{hold, h[:], []byte(owner), fence}
}
