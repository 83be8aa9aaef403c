package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/postgres"
)

// ForceRelease terminates a session only if pg_locks shows it holding the
// lock: with the record naming another live session (as a stale record
// would), that session survives, the holder keeps the lock, and the call
// fails instead of evicting an unreported holder.
func TestAdvisoryForceReleaseChecksHolder(t *testing.T) {
	conformance.Parallel(t)
	srv := server(t)
	admin := openPool(t, srv, nil)
	table := uniqueTable("advforce")
	ctx := ctxT(t, time.Minute)
	l := mustNew(t, openPool(t, srv, nil), postgres.WithMode(postgres.ModeAdvisory), postgres.WithTable(table), postgres.WithCreateTable(true))
	defer l.Close()
	lease, err := l.TryAcquire(ctx, "k", distlock.WithMetadata("m"))
	if err != nil {
		t.Fatal(err)
	}
	bystander, err := admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.Release()
	var pid int32
	if err := bystander.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `UPDATE "`+table+`" SET pid = $1 WHERE lock_key = 'k'`, pid); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ForceRelease(ctx, "k"); !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("ForceRelease with a stale record: %v, want ErrUnavailable", err)
	}
	if err := bystander.Ping(ctx); err != nil {
		t.Errorf("the session named by the stale record was terminated: %v", err)
	}
	if err := lease.Refresh(ctx, time.Minute); err != nil {
		t.Errorf("the holder lost its lock: %v", err)
	}
	// With the record right again, the holder is evicted and reported.
	holder, _ := postgres.PinnedPID(l, "k")
	if _, err := admin.Exec(ctx, `UPDATE "`+table+`" SET pid = $1 WHERE lock_key = 'k'`, int32(holder)); err != nil {
		t.Fatal(err)
	}
	info, err := l.ForceRelease(ctx, "k")
	if err != nil || !info.Held || info.Token != lease.Token() || info.Metadata != "m" {
		t.Errorf("ForceRelease = %+v, %v", info, err)
	}
	if err := lease.Refresh(ctx, time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("evicted holder's Refresh: %v", err)
	}
}
