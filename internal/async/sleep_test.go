package async

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSleepEndsWithCtx(t *testing.T) {
	require.NoError(t, Sleep(context.Background(), time.Millisecond), "Sleep(1ms)")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
		t.Fatalf("Sleep on an ended ctx = %v after %v, want context.Canceled at once", err, time.Since(start))
	}
}
