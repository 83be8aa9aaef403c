package distlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWithMetadataBounds(t *testing.T) {
	l := memory.MustNew(memory.NewNamespace())
	defer l.Close()
	ctx := context.Background()
	for _, md := range []string{strings.Repeat("x", distlock.MaxMetadataLen+1), "\xff"} {
		if _, err := l.TryAcquire(ctx, "k", distlock.WithMetadata(md)); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("WithMetadata(%d bytes): %v, want ErrInvalidOption", len(md), err)
		}
	}
	md := strings.Repeat("é", distlock.MaxMetadataLen/2)
	lease, err := l.TryAcquire(ctx, "k", distlock.WithMetadata(md))
	require.NoError(t, err)
	defer lease.Release(ctx)
	if info, err := l.Inspect(ctx, "k"); err != nil || info.Metadata != md {
		t.Errorf("Inspect: metadata of %d bytes, err %v; want the %d bytes given", len(info.Metadata), err, len(md))
	}
}

func TestInspectReachesTheDriver(t *testing.T) {
	ctx := context.Background()
	ns := memory.NewNamespace()
	l := memory.MustNew(ns)
	defer l.Close()
	lease, err := l.TryAcquire(ctx, "k")
	require.NoError(t, err)
	defer lease.Release(ctx)
	if info, err := l.Inspect(ctx, "k"); err != nil || !info.Held || info.Owner != lease.Owner() {
		t.Errorf("Inspect = %+v, %v", info, err)
	}
	if _, err := l.Inspect(ctx, ""); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Errorf("Inspect of an empty key: %v, want ErrInvalidKey", err)
	}
	if _, err := l.ForceRelease(ctx, strings.Repeat("k", 1025)); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Errorf("ForceRelease of a 1025-byte key: %v, want ErrInvalidKey", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Inspect(cctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Inspect with a cancelled ctx: %v, want context.Canceled", err)
	}
	closed := memory.MustNew(ns)
	closed.Close()
	if _, err := closed.ForceRelease(ctx, "k"); !errors.Is(err, distlock.ErrClosed) {
		t.Errorf("ForceRelease on a closed Locker: %v, want ErrClosed", err)
	}
}

func TestInspectUnsupportedBackend(t *testing.T) {
	l := distlock.New(&nopDriver{}, "nop")
	defer l.Close()
	ctx := context.Background()
	_, err := l.Inspect(ctx, "k")
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "nop") {
		t.Errorf("Inspect on a driver without Inspector: %v, want errors.ErrUnsupported naming the backend", err)
	}
	if _, err := l.ForceRelease(ctx, "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("ForceRelease on a driver without ForceReleaser: %v, want errors.ErrUnsupported", err)
	}
}

func TestForceReleaseLogsAndEndsTheLease(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	ns := memory.NewNamespace()
	holder := memory.MustNew(ns)
	defer holder.Close()
	operator := memory.MustNew(ns, memory.WithDefaults(distlock.WithLogger(logger)))
	defer operator.Close()
	lease, err := holder.TryAcquire(ctx, "k", distlock.WithMetadata("job=nightly"))
	require.NoError(t, err)
	info, err := operator.ForceRelease(ctx, "k")
	if err != nil || !info.Held || info.Token != lease.Token() || info.Metadata != "job=nightly" {
		t.Fatalf("ForceRelease = %+v, %v", info, err)
	}
	select {
	case <-lease.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the memory backend tells the evicted lease at once; still not Done after 5s")
	}
	assert.ErrorIs(t, lease.Err(), distlock.ErrLockLost, "evicted lease")
	if out := buf.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "job=nightly") || !strings.Contains(out, lease.Owner()) {
		t.Errorf("log of a forced release = %q", out)
	}
}
