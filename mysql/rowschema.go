package mysql

import (
	"context"

	"github.com/distlock/distlock/internal/sqllock"
)

// MySQL and MariaDB error numbers of the schema check.
const (
	erBadField     = 1054 // unknown column
	erDupFieldName = 1060 // column exists (a concurrent migration added it)
)

// rowColumns are the row-mode columns an older table may lack, in the order
// they were added:
//   - hold_ids: one id per live hold (older releases kept one request id
//     per row, in acq_id, now unused). Rows written before it have no hold
//     ids, which only means that an acquisition lost during the upgrade is
//     not given back early.
//   - metadata: the holder's WithMetadata, shown by Inspect. Rows written
//     before it show no metadata.
var rowColumns = []sqllock.Column{
	{Name: "hold_ids", Why: "predates per-hold ids", Add: "ADD COLUMN hold_ids MEDIUMBLOB NULL COMMENT 'one id per live hold: 32 hex digits and a comma each'"},
	{Name: "metadata", Why: "predates lock metadata", Add: "ADD COLUMN metadata VARBINARY(1024) NULL COMMENT 'the holder''s WithMetadata'"},
}

// schemaExec is the schema access of sqllock.Base.Upgrade.
func (b *base) schemaExec() sqllock.SchemaExec {
	return sqllock.SchemaExec{
		Exec: func(ctx context.Context, q string) error {
			_, err := b.db.ExecContext(ctx, q)
			return err
		},
		Missing: func(err error) bool { return mysqlCode(err) == erBadField },
		Exists:  func(err error) bool { return mysqlCode(err) == erDupFieldName },
	}
}

// fuColumns are the forupdate-mode columns an older table may lack, in the
// order they were added:
//   - owner, metadata, holds, conn_id: the holder record of the fence row
//     (kind 1), read by Inspect and ForceRelease.
//   - granted_at: when the last token was issued, read by the cleanup.
//     Rows written before it count as granted long ago (deleted by the
//     next cleanup pass when their lock is free).
var fuColumns = []sqllock.Column{
	{Name: "owner, metadata, holds, conn_id", Why: "predates holder records",
		Add: "ADD COLUMN owner VARBINARY(256) NULL, ADD COLUMN metadata VARBINARY(1024) NULL, ADD COLUMN holds INT NULL, ADD COLUMN conn_id BIGINT UNSIGNED NULL"},
	{Name: "granted_at", Why: "predates the fencing-record cleanup",
		Add: "ADD COLUMN granted_at DATETIME(6) NULL COMMENT 'kind 1: when the last token was issued (UTC, database clock)'"},
}
