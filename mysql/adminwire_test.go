package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/mysql"
)

// adminCalls runs the operator calls of l's mode (Inspect and ForceRelease
// of a held and of a free key, a cleanup pass over released keys) and
// returns the commands each sent, read off the wire.
func adminCalls(t *testing.T, ctx context.Context, l *distlock.Locker, w *wire) map[string][]string {
	t.Helper()
	sent := map[string][]string{}
	call := func(name string, f func() error) {
		w.reset()
		require.NoError(t, f(), name)
		sent[name] = w.queries()
		for _, q := range sent[name] {
			t.Logf("%s: %q", name, q)
		}
	}
	for _, k := range []string{"a", "b", "c"} {
		lease, err := l.TryAcquire(ctx, k, distlock.WithOwner("o"), distlock.WithMetadata("m"))
		require.NoError(t, err)
		require.NoError(t, lease.Release(ctx))
	}
	lease, err := l.TryAcquire(ctx, "held", distlock.WithOwner("o"), distlock.WithMetadata("m"))
	require.NoError(t, err)
	call("inspect held", func() error {
		info, err := l.Inspect(ctx, "held")
		require.True(t, info.Held)
		require.Equal(t, "o", info.Owner)
		require.Equal(t, "m", info.Metadata)
		require.Equal(t, lease.Token(), info.Token)
		require.Equal(t, 1, info.Holds)
		return err
	})
	call("inspect free", func() error {
		info, err := l.Inspect(ctx, "a")
		require.False(t, info.Held)
		return err
	})
	call("cleanup", func() error {
		n, err := mysql.CleanupNow(ctx, l, 0, 10)
		require.Equal(t, 3, n)
		return err
	})
	call("force held", func() error {
		info, err := l.ForceRelease(ctx, "held")
		require.True(t, info.Held)
		require.Equal(t, lease.Token(), info.Token)
		return err
	})
	call("force free", func() error {
		info, err := l.ForceRelease(ctx, "b")
		require.False(t, info.Held)
		return err
	})
	return sent
}

// Row mode's operator calls take the round trips they are built with:
// Inspect one statement; ForceRelease a transaction of a locking read and,
// when the row is held, the UPDATE that frees it; a cleanup pass of three
// released keys its nine statements (SET TRANSACTION ISOLATION LEVEL
// included).
func TestRowAdminRoundTrips(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	w := &wire{}
	l := mustNew(t, wiredDB(t, server(t), w), mysql.WithTable(uniqueTable("adminwire")), mysql.WithCleanup(0, 0, 10))
	defer l.Close()
	sent := adminCalls(t, ctx, l, w)
	for name, want := range map[string]int{"inspect held": 1, "inspect free": 1, "force held": 4, "force free": 3, "cleanup": 9} {
		require.Len(t, sent[name], want, name)
	}
}

// Forupdate mode's Inspect is a locking read NOWAIT in a transaction
// rolled back at once, and, when the row is locked, one read of the
// holder's record.
func TestForUpdateAdminRoundTrips(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	w := &wire{}
	l := mustNew(t, wiredDB(t, server(t), w), mysql.WithMode(mysql.ModeForUpdate), mysql.WithTable(uniqueTable("fuadminwire")), mysql.WithCleanup(0, 0, 10))
	defer l.Close()
	sent := adminCalls(t, ctx, l, w)
	for name, want := range map[string]int{"inspect held": 4, "inspect free": 3} {
		require.Len(t, sent[name], want, name)
	}
}
