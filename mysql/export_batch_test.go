package mysql

import (
	"database/sql"

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
