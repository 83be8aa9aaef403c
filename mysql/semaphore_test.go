package mysql_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/mysql"
)

// A permit's round trips: its acquisition is one transaction (START
// TRANSACTION, lock the semaphore's row, read its count, purge expired
// permits, count the live ones, raise the fence, insert the permit,
// COMMIT); a refusal commits after the count (keeping the purge); Refresh
// and Release are one statement each, held or not.
func TestPermitRoundTrips(t *testing.T) {
	w := &wire{}
	l := mustNew(t, wiredDB(t, server(t), w), mysql.WithTable(uniqueTable("prt")), mysql.WithCreateTable(true))
	defer l.Close()
	ctx := ctxT(t, time.Minute)
	key := "permit-round-trips"
	one, err := l.Semaphore(key, 1)
	if err != nil {
		t.Fatal(err)
	}
	two, err := l.Semaphore(key, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Warm up: the first acquisition creates the tables and a connection.
	lease, err := one.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var permit backend.Lock
	for _, s := range []struct {
		name string
		want int
		f    func() error
	}{
		{"TryAcquire", 8, func() (err error) { lease, err = one.TryAcquire(ctx, distlock.WithAutoRefresh(false)); return err }},
		{"Refresh", 1, func() error { return lease.Refresh(ctx, time.Minute) }},
		{"busy TryAcquire", 6, func() error {
			var busy *backend.BusyError
			if _, err := one.TryAcquire(ctx); !errors.As(err, &busy) || busy.RetryAfter <= 50*time.Second || busy.RetryAfter > time.Minute {
				return fmt.Errorf("want busy for the permit's remaining ~1m, got %v", err)
			}
			return nil
		}},
		{"TryAcquire of another count", 6, func() error {
			var pe *backend.PermitsError
			if _, err := two.TryAcquire(ctx); !errors.As(err, &pe) || *pe != (backend.PermitsError{Key: key, Have: 1, Want: 2}) {
				return fmt.Errorf("want PermitsError{have 1, want 2}, got %v", err)
			}
			return nil
		}},
		{"Release", 1, func() error { return lease.Release(ctx) }},
		{"driver TryAcquirePermit", 8, func() (err error) {
			permit, err = mysql.Driver(l).(backend.Semaphorer).TryAcquirePermit(ctx, backend.Request{Key: key, Owner: "o", TTL: time.Minute}, 2)
			return err
		}},
		{"driver Release", 1, func() error { return permit.Release(ctx) }},
		{"driver Release of a permit not held", 1, func() error { return notHeld(permit.Release(ctx)) }},
		{"driver Refresh of a permit not held", 1, func() error { return notHeld(permit.Refresh(ctx, time.Minute)) }},
	} {
		w.reset()
		if err := s.f(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := w.roundTrips(); got != s.want {
			t.Errorf("%s: %d round trips, want %d: %q", s.name, got, s.want, w.queries())
		}
	}
}

// notHeld is nil for an error that wraps ErrNotHeld.
func notHeld(err error) error {
	if !errors.Is(err, backend.ErrNotHeld) {
		return fmt.Errorf("want ErrNotHeld, got %v", err)
	}
	return nil
}
