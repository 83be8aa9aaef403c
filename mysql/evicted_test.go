package mysql_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/mysql"
)

// An owner's nested acquisition asks the server whether the connection of
// its hold still holds the lock: after the hold was taken away on the
// server (ForceRelease through another Locker, KILL CONNECTION) and another
// owner took the lock, it is refused and the evicted lease ends, although
// the keepalive (30s) has not yet noticed. Row mode nests only into a live
// tenure of the row.
func TestNestIntoEvictedHold(t *testing.T) {
	t.Parallel() // its subtests: conformance.Parallel
	srv := server(t)
	admin := adminDB(t, srv)
	for _, tc := range []struct {
		name string
		mode mysql.Mode
		kill bool
	}{
		{"forupdate/force-release", mysql.ModeForUpdate, false},
		{"forupdate/kill", mysql.ModeForUpdate, true},
		{"row/force-release", mysql.ModeRow, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conformance.Parallel(t)
			table := uniqueTable("evnest")
			opts := []mysql.Option{mysql.WithMode(tc.mode), mysql.WithTable(table), mysql.WithKeepalive(30 * time.Second)}
			a := mustNew(t, openDB(t, config(t, srv)), opts...)
			defer a.Close()
			b := mustNew(t, openDB(t, config(t, srv)), opts...)
			defer b.Close()
			sqltest.EvictedNest(t, a, b, "job", tc.mode == mysql.ModeForUpdate, func(ctx context.Context) error {
				if !tc.kill {
					_, err := b.ForceRelease(ctx, "job")
					return err
				}
				id, ok := mysql.PinnedConnID(a, "job")
				if !ok {
					t.Fatal("no pinned connection for the held key")
				}
				_, err := admin.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10))
				return err
			})
		})
	}
}

// A restart of the server ends the holder's connection too: after it, the
// owner's nested acquisition is refused while another owner holds the lock.
func TestNestAfterRestart(t *testing.T) {
	conformance.Parallel(t)
	srv := ownServer(t)
	table := uniqueTable("evrst")
	opts := []mysql.Option{mysql.WithMode(mysql.ModeForUpdate), mysql.WithTable(table), mysql.WithKeepalive(30 * time.Second)}
	a := mustNew(t, openDB(t, config(t, srv)), opts...)
	defer a.Close()
	b := mustNew(t, openDB(t, config(t, srv)), opts...)
	defer b.Close()
	sqltest.EvictedNest(t, a, b, "job", true, func(ctx context.Context) error {
		if err := srv.Kill(); err != nil {
			return err
		}
		return srv.Restart(ctx)
	})
}
