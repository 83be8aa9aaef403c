package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/postgres"
)

// An owner's nested acquisition asks the server whether the session of its
// hold still holds the lock: after the hold was taken away on the server
// (ForceRelease through another Locker, pg_terminate_backend of the
// session) and another owner took the lock, it is refused and the evicted
// lease ends, although the keepalive (30s) has not yet noticed. Row mode
// nests only into a live tenure of the row.
func TestNestIntoEvictedHold(t *testing.T) {
	t.Parallel() // its subtests: conformance.Parallel
	srv := server(t)
	admin := openPool(t, srv, nil)
	for _, tc := range []struct {
		name      string
		mode      postgres.Mode
		terminate bool
	}{
		{"advisory/force-release", postgres.ModeAdvisory, false},
		{"advisory/terminate", postgres.ModeAdvisory, true},
		{"row/force-release", postgres.ModeRow, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conformance.Parallel(t)
			table := uniqueTable("evnest")
			opts := []postgres.Option{postgres.WithMode(tc.mode), postgres.WithTable(table),
				postgres.WithCreateTable(true), postgres.WithKeepalive(30 * time.Second)}
			a := mustNew(t, openPool(t, srv, nil), opts...)
			defer a.Close()
			b := mustNew(t, openPool(t, srv, nil), opts...)
			defer b.Close()
			sqltest.EvictedNest(t, a, b, "job", tc.mode == postgres.ModeAdvisory, func(ctx context.Context) error {
				if !tc.terminate {
					_, err := b.ForceRelease(ctx, "job")
					return err
				}
				pid, ok := postgres.PinnedPID(a, "job")
				if !ok {
					t.Fatal("no pinned session for the held key")
				}
				return terminate(ctx, admin, pid)
			})
		})
	}
}

// A restart of the server ends the holder's session too: after it, the
// owner's nested acquisition is refused while another owner holds the lock.
func TestNestAfterRestart(t *testing.T) {
	conformance.Parallel(t)
	srv := ownServer(t)
	table := uniqueTable("evrst")
	opts := []postgres.Option{postgres.WithMode(postgres.ModeAdvisory), postgres.WithTable(table),
		postgres.WithCreateTable(true), postgres.WithKeepalive(30 * time.Second)}
	a := mustNew(t, openPool(t, srv, nil), opts...)
	defer a.Close()
	b := mustNew(t, openPool(t, srv, nil), opts...)
	defer b.Close()
	sqltest.EvictedNest(t, a, b, "job", true, func(ctx context.Context) error {
		if err := srv.Kill(); err != nil {
			return err
		}
		return srv.Restart(ctx)
	})
}
