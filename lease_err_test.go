package distlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
)

// TestLeaseErrNamesKey: Lease.Err is an *Error naming the key, and Do's
// lock-lost error is that *Error.
func TestLeaseErrNamesKey(t *testing.T) {
	ctx := context.Background()
	l, err := distlock.Open(ctx, "mem://lease-err")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err := l.Acquire(ctx, "named/key")
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(ctx)
	var e *distlock.Error
	if err := lease.Err(); !errors.As(err, &e) || e.Key != "named/key" || !strings.Contains(err.Error(), `"named/key"`) || !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Err after Release = %v, want an *Error naming the key", err)
	}
	if err := lease.Release(ctx); strings.Count(err.Error(), "named/key") != 1 {
		t.Errorf("second Release = %v, want the key named once", err)
	}
	err = l.Do(ctx, "lost/key", func(ctx context.Context) error {
		memory.Shared("lease-err").Expire("lost/key")
		<-ctx.Done()
		return nil
	}, distlock.WithTTL(300*time.Millisecond))
	if e, ok := err.(*distlock.Error); !ok || e.Key != "lost/key" || !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Do after the lock was lost = %v (%T), want an *Error naming the key wrapping ErrLockLost", err, err)
	}
}
