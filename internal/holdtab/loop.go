package holdtab

import (
	"context"
	"time"
)

// Loop is the acquisition loop of a session-bound backend. Each round
// returns ctxErr() once ctx has ended, then joins a hold of the same owner
// if nest finds one (or returns nest's error), and otherwise makes one
// attempt, which gets a session and tries to hold there. An attempt that
// reports restart (its session ended or its record vanished) is made
// again, after a pause of 50ms per earlier restart, at most 1s, from the
// second restart on; pause waits it out or returns why it could not (ctx
// ended, driver closed). Without wait, the third restart in a row returns
// the attempt's error (a transient failure). Any other outcome of an
// attempt is returned as it is.
func Loop[L any](ctx context.Context, wait bool, ctxErr func() error, nest func() (L, bool, error), attempt func() (l L, restart bool, err error), pause func(time.Duration) error) (L, error) {
	var none L
	for restarts := 0; ; restarts++ {
		if ctx.Err() != nil {
			return none, ctxErr()
		}
		if l, ok, err := nest(); ok || err != nil {
			return l, err
		}
		l, restart, err := attempt()
		if !restart {
			return l, err
		}
		if !wait && restarts >= 2 {
			return none, err // ErrorCode: transient
		}
		if restarts > 0 {
			if err := pause(min(time.Duration(restarts)*50*time.Millisecond, time.Second)); err != nil {
				return none, err
			}
		}
	}
}
