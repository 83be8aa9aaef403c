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

// rowMigrateDDL adds the hold_ids column to a row-mode table created by a
// distlock release that kept one request id per row (acq_id, now unused).
// Adding a nullable column at the end is an instant change on MariaDB 10.3+
// and MySQL 8.0.12+; rows written before it have no hold ids, which only
// means that an acquisition lost during the upgrade is not given back early.
func rowMigrateDDL(table string) string {
	return `ALTER TABLE ` + table + ` ADD COLUMN hold_ids MEDIUMBLOB NULL COMMENT 'one id per live hold: 32 hex digits and a comma each'`
}

// rowSchema checks that the row-mode table has the hold_ids column, and
// adds it when the Locker manages the schema (WithCreateTable, the
// default). Without it, a table of an older release is refused with the
// statement that upgrades it: its statements would fail on every call.
func (b *base) rowSchema(ctx context.Context) error {
	_, err := b.db.ExecContext(ctx, `SELECT hold_ids FROM `+b.Table+` WHERE FALSE`)
	if err == nil {
		return nil
	}
	if mysqlCode(err) != erBadField {
		return fmt.Errorf("check lock table: %w", sqllock.Failed(ctx, err))
	}
	if !b.Create {
		return fmt.Errorf("%w: lock table %s predates per-hold ids (no hold_ids column); upgrade it with: %s", backend.ErrInvalidOption, b.Table, rowMigrateDDL(b.Table))
	}
	if _, err := b.db.ExecContext(ctx, rowMigrateDDL(b.Table)); err != nil && mysqlCode(err) != erDupFieldName {
		return fmt.Errorf("upgrade lock table %s: %w", b.Table, sqllock.Failed(ctx, err))
	}
	return nil
}
