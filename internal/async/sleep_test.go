package async

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleepEndsWithCtx(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep(1ms) = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
		t.Fatalf("Sleep on an ended ctx = %v after %v, want context.Canceled at once", err, time.Since(start))
	}
}
