package mysql

import (
	"database/sql"

	"github.com/jmoiron/sqlx"

	"github.com/distlock/distlock/backend"
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
	d := newDriver(sqlx.NewDb(db, "mysql"), false, newConfig([]Option{WithTable(table)})).(*rowDriver)
	if batchMax > 0 {
		d.batchMax = batchMax
	}
	return d
}

// RefreshBatchSQL is the batched refresh statement of n locks on table.
func RefreshBatchSQL(table string, n int) string {
	return newRowDriver(&base{table: quoteTable(table)}).refreshBatchSQL(n)
}

// RowBatchMax exposes rowBatchMax.
const RowBatchMax = rowBatchMax
