package zookeeper

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/sqltest"
)

// TestUnreachableServer: with nothing listening on the server's port,
// TryAcquire, Acquire, Inspect and ForceRelease fail within about the
// client's retry period (well before the 10 s connect timeout) with a
// transient ErrUnavailable, in one line naming the address and the dial
// error.
func TestUnreachableServer(t *testing.T) {
	t.Parallel()
	addr := sqltest.ClosedPort(t)
	l, err := distlock.Open(ctxT(t, 10*time.Second), "zookeeper://"+addr+"/x?session_timeout=10s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	check := func(op string, call func(ctx context.Context) error) {
		t.Helper()
		start := time.Now()
		err := call(ctxT(t, 30*time.Second))
		took := time.Since(start)
		switch {
		case err == nil:
			t.Errorf("%s on %s: no error", op, addr)
		case !errors.Is(err, distlock.ErrUnavailable):
			t.Errorf("%s: %v, want ErrUnavailable", op, err)
		case !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "connection refused"):
			t.Errorf("%s: %q names not both the address %s and the cause", op, err, addr)
		case strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: error of several lines: %q", op, err)
		}
		if took > slack.D(3*time.Second) {
			t.Errorf("%s took %v, want about the client's 1 s retry period", op, took)
		}
	}
	check("TryAcquire", func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "k"); return err })
	check("Acquire", func(ctx context.Context) error { _, err := l.Acquire(ctx, "k"); return err })
	check("Inspect", func(ctx context.Context) error { _, err := l.Inspect(ctx, "k"); return err })
	check("ForceRelease", func(ctx context.Context) error { _, err := l.ForceRelease(ctx, "k"); return err })
}
