package redis

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/redislua"
)

// Retry of a script refused during a slot migration on a Cluster. While a
// slot migrates and some of the keys a multi-key script names have moved
// and others not (or some do not exist: the acquire script names the
// lock's legacy fencing counter, which never does), Redis refuses the
// script with TRYAGAIN until the migration ends, usually milliseconds
// later; and go-redis, whose attempts at one command are shared between
// TRYAGAIN and redirects, can run out of them on the MOVED or ASK of a
// migration's last steps (or while source and target redirect to each
// other, between their CLUSTER SETSLOT NODE). The driver retries such a
// script itself, backing off from tryAgainMinBackoff, doubling to
// tryAgainMaxBackoff, until tryAgainBound after the first refusal (the
// last attempt is made then), never past the caller's ctx; then the last
// reply is returned (ErrUnavailable, with the TRYAGAIN, MOVED or ASK reply
// as its cause).
const (
	tryAgainBound      = 2 * time.Second
	tryAgainMinBackoff = 5 * time.Millisecond
	tryAgainMaxBackoff = 100 * time.Millisecond
)

// migrationRefusal reports whether err is a node's refusal to run a
// command while its slot migrates: TRYAGAIN, or a redirect (MOVED, ASK)
// that outlasted the client's redirects.
func migrationRefusal(err error) bool {
	return goredis.IsTryAgainError(err) || redislua.IsRedirect(err)
}

// retryTryAgain runs op, and again after a backoff while it fails with a
// migration refusal, as the constants above say, if cluster (other clients
// get neither from a script: a redirect from a Cluster node used as a
// single server is a configuration error). A retry is safe: TRYAGAIN,
// MOVED and ASK are the server's refusal to run the script at all, so the
// failed call changed nothing. op's abandoned result (the caller's ctx
// ended with a request in flight) ends the retries. When ctx ends during a
// backoff, the last result is returned: the caller's error handling adds
// ctx's error.
func retryTryAgain[T any](ctx context.Context, cluster bool, op func() (T, bool, error)) (T, bool, error) {
	v, abandoned, err := op()
	if !cluster || abandoned || !migrationRefusal(err) {
		return v, abandoned, err
	}
	deadline := time.Now().Add(tryAgainBound)
	backoff := tryAgainMinBackoff
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return v, abandoned, err
		}
		t := time.NewTimer(min(backoff, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return v, abandoned, err
		case <-t.C:
		}
		v, abandoned, err = op()
		if abandoned || !migrationRefusal(err) {
			return v, abandoned, err
		}
		backoff = min(2*backoff, tryAgainMaxBackoff)
	}
}

// withTryAgain is run with retryTryAgain, for an operation whose caller
// is never told it was abandoned (run inside async.Call, which passes it
// the caller's ctx, or on the caller's goroutine).
func withTryAgain[T any](cluster bool, run func(context.Context) (T, error)) func(context.Context) (T, error) {
	if !cluster {
		return run
	}
	return func(ctx context.Context) (T, error) {
		v, _, err := retryTryAgain(ctx, cluster, func() (T, bool, error) {
			v, err := run(ctx)
			return v, false, err
		})
		return v, err
	}
}
