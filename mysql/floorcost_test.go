package mysql_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/mysql"
)

// BenchmarkRowFloorRead is the acquire+release cycle of row mode with the
// acquire statement as it is ("floor") and with its floor read replaced by
// a constant taking the same argument ("nofloor"), side by side on one
// table and server: the cost of the fence floor on every acquisition.
func BenchmarkRowFloorRead(b *testing.B) {
	srv := server(b)
	db := openDB(b, config(b, srv))
	l := mustNew(b, db, mysql.WithTable(uniqueTable("floorcost")), mysql.WithCleanup(0, 0, 1))
	defer l.Close()
	ctx := context.Background()
	if _, err := l.TryAcquire(ctx, "warm"); err != nil { // creates the table and floors
		b.Fatal(err)
	}
	acq, rel, aargs, rargs := mysql.RowAcquireSQL(l, "k", "o", int64(time.Minute/time.Microsecond))
	variants := map[string]string{
		"floor":   acq,
		"nofloor": strings.Replace(acq, mysql.FloorReadSQL(l), "(SELECT 0 FROM DUAL WHERE ? IS NULL)", 1),
	}
	if variants["nofloor"] == acq {
		b.Fatal("floor read not found in the acquire statement")
	}
	for _, name := range []string{"floor", "nofloor"} {
		q := variants[name]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				res, err := db.ExecContext(ctx, q, aargs...)
				if err != nil {
					b.Fatal(err)
				}
				fence, _ := res.LastInsertId()
				if _, err := db.ExecContext(ctx, rel, append(rargs[:3:3], fence)...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
