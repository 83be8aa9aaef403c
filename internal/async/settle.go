package async

import (
	"context"
	"errors"
	"net"
	"os"
	"time"
)

// Settle waits, when err is a network timeout and ctx's deadline has
// passed by the clock, until ctx reports it (at most a second). A client
// that sets its connection's deadline from ctx's (go-redis with
// ContextTimeoutEnabled, a dialer) can fail with "i/o timeout" a moment
// before the timer that ends ctx has fired: ctx.Err() is then still nil,
// and the failure would read as an outage instead of the caller's
// deadline. Call it before classifying err by ctx.Err(); any other error
// returns at once.
func Settle(ctx context.Context, err error) {
	if ctx.Err() != nil || !isTimeout(err) || !past(ctx) {
		return
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// isTimeout reports whether err is a deadline reached on a connection.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
