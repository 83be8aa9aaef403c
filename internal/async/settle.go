package async

import (
	"context"
	"time"
)

// Settle waits, when ctx's deadline has passed, until ctx reports it (at
// most a second). A client that sets its connection's deadline from ctx's
// (go-redis with ContextTimeoutEnabled, a dialer) can fail with "i/o
// timeout" a moment before the timer that ends ctx has fired: ctx.Err() is
// then still nil, and the failure would read as an outage instead of the
// caller's deadline. Call it before classifying an error by ctx.Err().
func Settle(ctx context.Context) {
	if ctx.Err() != nil || !past(ctx) {
		return
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
