package redis

import (
	"context"
	"os"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/conformance"
)

// quietLogger drops go-redis's log lines (dial failures while a test has
// killed the server on purpose); tests report what matters themselves.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	if os.Getenv("DISTLOCK_REDIS_LOG") == "" {
		goredis.SetLogger(quietLogger{})
	}
	conformance.ServeWorker() // worker processes of the conformance fault checks
	os.Exit(m.Run())
}
