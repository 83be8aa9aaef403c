package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// go-redis logs some failures itself, such as a pool that cannot dial
// ("failed to dial after 5 attempts"), through one process-wide logger
// that writes to stderr. distlock returns those failures as errors and
// reports them through the Locker's logger (distlock.WithLogger), so
// importing this package routes go-redis's lines to slog.Default() at
// Debug level instead: a program sees them by enabling Debug on its default
// logger. A later go-redis SetLogger call replaces this routing.
func init() { goredis.SetLogger(slogLogger{}) }

// slogLogger is go-redis's Logging over slog.Default().
type slogLogger struct{}

func (slogLogger) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	slog.Default().DebugContext(ctx, "go-redis: "+msg)
}
