package redis

import (
	"context"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// TestClientLogRouted: in a program that imports this package and leaves
// go-redis's logger alone, go-redis's own log lines (a pool that cannot
// dial) do not go to stderr but to slog's default logger, at Debug. The
// check runs in a child process of this test binary, since TestMain
// replaces go-redis's logger (DISTLOCK_REDIS_LOG keeps it).
func TestClientLogRouted(t *testing.T) {
	if os.Getenv("DISTLOCK_TEST_CLIENT_LOG_CHILD") != "" {
		clientLogChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestClientLogRouted$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DISTLOCK_TEST_CLIENT_LOG_CHILD=1", "DISTLOCK_REDIS_LOG=1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v; stdout %q stderr %q", err, stdout.String(), stderr.String())
	}
	assert.NotContains(t, stderr.String(), "dial", "go-redis wrote to stderr: %q", stderr.String())
	assert.Contains(t, stdout.String(), "routed: ", "go-redis's line did not reach slog's default logger at Debug; child stdout %q", stdout.String())
}

// clientLogChild makes go-redis log a failed dial, and prints on stdout
// the Debug records slog's default logger received.
func clientLogChild() {
	h := &debugRecords{}
	slog.SetDefault(slog.New(h))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Ping(ctx).Err()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.msgs {
		os.Stdout.WriteString("routed: " + m + "\n")
	}
}

type debugRecords struct {
	mu   sync.Mutex
	msgs []string
}

func (h *debugRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *debugRecords) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelDebug && strings.Contains(r.Message, "dial") {
		h.mu.Lock()
		h.msgs = append(h.msgs, r.Message)
		h.mu.Unlock()
	}
	return nil
}
func (h *debugRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *debugRecords) WithGroup(string) slog.Handler      { return h }
