package mysql

import (
	"context"
	"fmt"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/sqllock"
)

// MySQL and MariaDB error numbers of the schema check.
const (
	erBadField     = 1054 // unknown column
	erDupFieldName = 1060 // column exists (a concurrent migration added it)
)

// rowColumn is a column added to the row-mode table after its first
// release, with the statement that adds it to an older table. Adding a
// nullable column at the end is an instant change on MariaDB 10.3+ and
// MySQL 8.0.12+.
type rowColumn struct {
	name, why, ddl string
}

// rowColumns are the row-mode columns an older table may lack, in the order
// they were added:
//   - hold_ids: one id per live hold (older releases kept one request id
//     per row, in acq_id, now unused). Rows written before it have no hold
//     ids, which only means that an acquisition lost during the upgrade is
//     not given back early.
//   - metadata: the holder's WithMetadata, shown by Inspect. Rows written
//     before it show no metadata.
var rowColumns = []rowColumn{
	{"hold_ids", "predates per-hold ids", "ADD COLUMN hold_ids MEDIUMBLOB NULL COMMENT 'one id per live hold: 32 hex digits and a comma each'"},
	{"metadata", "predates lock metadata", "ADD COLUMN metadata VARBINARY(1024) NULL COMMENT 'the holder''s WithMetadata'"},
}

// rowMigrateDDL is the statement that adds column c to table.
func rowMigrateDDL(table string, c rowColumn) string { return `ALTER TABLE ` + table + ` ` + c.ddl }

// rowSchema checks that the row-mode table has every column, and adds a
// missing one when the Locker manages the schema (WithCreateTable, the
// default). Without it, a table of an older release is refused with the
// statement that upgrades it: its statements would fail on every call.
func (b *base) rowSchema(ctx context.Context) error {
	if _, err := b.db.ExecContext(ctx, `SELECT hold_ids, metadata FROM `+b.Table+` WHERE FALSE`); err == nil {
		return nil // the current shape: one round trip
	}
	for _, c := range rowColumns {
		_, err := b.db.ExecContext(ctx, `SELECT `+c.name+` FROM `+b.Table+` WHERE FALSE`)
		if err == nil {
			continue
		}
		if mysqlCode(err) != erBadField {
			return fmt.Errorf("check lock table: %w", sqllock.Failed(ctx, err))
		}
		if !b.Create {
			return fmt.Errorf("%w: lock table %s %s (no %s column); upgrade it with: %s", backend.ErrInvalidOption, b.Table, c.why, c.name, rowMigrateDDL(b.Table, c))
		}
		if _, err := b.db.ExecContext(ctx, rowMigrateDDL(b.Table, c)); err != nil && mysqlCode(err) != erDupFieldName {
			return fmt.Errorf("upgrade lock table %s: %w", b.Table, sqllock.Failed(ctx, err))
		}
	}
	return nil
}
