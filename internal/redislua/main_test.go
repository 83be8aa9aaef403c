package redislua

import (
	"context"
	"os"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// TestMain silences go-redis's dial-failure log lines, which the
// unavailable-server tests provoke on purpose.
func TestMain(m *testing.M) {
	if os.Getenv("DISTLOCK_REDIS_LOG") == "" {
		goredis.SetLogger(quietLogger{})
	}
	os.Exit(m.Run())
}
