package permittest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

// Statements are what each operation on a permit sends: an acquisition
// that grants one (Grant) and one refused (Refuse: every permit held, or
// another count), in round trips.
type Statements struct{ Grant, Refuse int }

// RoundTrips checks the statements of each operation on a permit of a
// fresh key, through l and through its driver d: an acquisition granted
// sends want.Grant, a refused one (busy with the permit's remaining TTL,
// another count) want.Refuse, a Refresh and a Release one each, held or
// not. sent counts the statements sent so far.
func RoundTrips(t *testing.T, l *distlock.Locker, d backend.Driver, want Statements, sent func() int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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
		{"TryAcquire", want.Grant, func() (err error) { lease, err = one.TryAcquire(ctx, distlock.WithAutoRefresh(false)); return err }},
		{"Refresh", 1, func() error { return lease.Refresh(ctx, time.Minute) }},
		{"busy TryAcquire", want.Refuse, func() error {
			var busy *backend.BusyError
			if _, err := one.TryAcquire(ctx); !errors.As(err, &busy) || busy.RetryAfter <= 50*time.Second || busy.RetryAfter > time.Minute {
				return fmt.Errorf("want busy for the permit's remaining ~1m, got %v", err)
			}
			return nil
		}},
		{"TryAcquire of another count", want.Refuse, func() error {
			var pe *backend.PermitsError
			if _, err := two.TryAcquire(ctx); !errors.As(err, &pe) || *pe != (backend.PermitsError{Key: key, Have: 1, Want: 2}) {
				return fmt.Errorf("want PermitsError{have 1, want 2}, got %v", err)
			}
			return nil
		}},
		{"Release", 1, func() error { return lease.Release(ctx) }},
		{"driver TryAcquire of a permit", want.Grant, func() (err error) {
			permit, err = d.TryAcquire(ctx, backend.Request{Key: key, Owner: "o", TTL: time.Minute, Permits: 2})
			return err
		}},
		{"driver Release", 1, func() error { return permit.Release(ctx) }},
		{"driver Release of a permit not held", 1, func() error { return notHeld(permit.Release(ctx)) }},
		{"driver Refresh of a permit not held", 1, func() error { return notHeld(permit.Refresh(ctx, time.Minute)) }},
	} {
		before := sent()
		if err := s.f(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := sent() - before; got != s.want {
			t.Errorf("%s: %d round trips, want %d", s.name, got, s.want)
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
