package postgres_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/postgres"
)

// A permit's statements: its acquisition is one transaction (begin, lock
// the semaphore's row and read its count, purge expired permits and count
// the live ones, raise the fence and insert the permit, commit); a refusal
// commits after the count (keeping the purge); Refresh and Release are one
// statement each, held or not.
func TestPermitRoundTrips(t *testing.T) {
	pool, tr := tracedPool(t, server(t))
	l := mustNew(t, pool, postgres.WithTable(uniqueTable("prt")), postgres.WithCreateTable(true))
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
		{"TryAcquire", 5, func() (err error) { lease, err = one.TryAcquire(ctx, distlock.WithAutoRefresh(false)); return err }},
		{"Refresh", 1, func() error { return lease.Refresh(ctx, time.Minute) }},
		{"busy TryAcquire", 4, func() error {
			var busy *backend.BusyError
			if _, err := one.TryAcquire(ctx); !errors.As(err, &busy) || busy.RetryAfter <= 50*time.Second || busy.RetryAfter > time.Minute {
				return fmt.Errorf("want busy for the permit's remaining ~1m, got %v", err)
			}
			return nil
		}},
		{"TryAcquire of another count", 4, func() error {
			var pe *backend.PermitsError
			if _, err := two.TryAcquire(ctx); !errors.As(err, &pe) || *pe != (backend.PermitsError{Key: key, Have: 1, Want: 2}) {
				return fmt.Errorf("want PermitsError{have 1, want 2}, got %v", err)
			}
			return nil
		}},
		{"Release", 1, func() error { return lease.Release(ctx) }},
		{"driver TryAcquirePermit", 5, func() (err error) {
			permit, err = postgres.Driver(l).(backend.Semaphorer).TryAcquirePermit(ctx, backend.Request{Key: key, Owner: "o", TTL: time.Minute}, 2)
			return err
		}},
		{"driver Release", 1, func() error { return permit.Release(ctx) }},
		{"driver Release of a permit not held", 1, func() error { return notHeld(permit.Release(ctx)) }},
		{"driver Refresh of a permit not held", 1, func() error { return notHeld(permit.Refresh(ctx, time.Minute)) }},
	} {
		before := tr.n.Load()
		if err := s.f(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := int(tr.n.Load() - before); got != s.want {
			t.Errorf("%s: %d statements, want %d", s.name, got, s.want)
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
