package sqllock

import (
	"context"
	"fmt"
	"strings"

	"github.com/distlock/distlock/backend"
)

// Column is a column added to a mode's table after the table's first
// release, with the clause that adds it to an older table (a nullable
// column at the end: an instant change on MariaDB 10.3+, MySQL 8.0.12+ and
// PostgreSQL).
type Column struct {
	Name string // the column
	Why  string // what a table without it predates, for the error
	Add  string // "ADD COLUMN …"
}

// AlterSQL is the statement that adds c to table (quoted).
func (c Column) AlterSQL(table string) string { return `ALTER TABLE ` + table + ` ` + c.Add }

// Schema access of Upgrade: exec runs a statement; missing reports that
// its error is the server's "no such column".
type SchemaExec struct {
	Exec    func(ctx context.Context, q string) error
	Missing func(err error) bool
	// Exists reports that an ALTER's error says the column exists (a
	// concurrent upgrade added it).
	Exists func(err error) bool
}

// Upgrade checks that b's table has every column of cols (one round trip
// when it has), and adds the missing ones when the Locker manages the
// schema (Create). Otherwise a table of an older release is refused with
// an error wrapping backend.ErrInvalidOption that prints the statement
// upgrading it: its statements would fail on every call.
func (b *Base) Upgrade(ctx context.Context, cols []Column, s SchemaExec) error {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	if s.Exec(ctx, `SELECT `+strings.Join(names, ", ")+` FROM `+b.Table+` WHERE FALSE`) == nil {
		return nil
	}
	for _, c := range cols {
		err := s.Exec(ctx, `SELECT `+c.Name+` FROM `+b.Table+` WHERE FALSE`)
		if err == nil {
			continue
		}
		if !s.Missing(err) {
			return fmt.Errorf("check lock table: %w", Failed(ctx, err))
		}
		if !b.Create {
			return fmt.Errorf("%w: lock table %s %s (no %s column); upgrade it with: %s", backend.ErrInvalidOption, b.Table, c.Why, c.Name, c.AlterSQL(b.Table))
		}
		if err := s.Exec(ctx, c.AlterSQL(b.Table)); err != nil && !s.Exists(err) {
			return fmt.Errorf("upgrade lock table %s: %w", b.Table, Failed(ctx, err))
		}
	}
	return nil
}
