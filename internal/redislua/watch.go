package redislua

import (
	"context"

	goredis "github.com/redis/go-redis/v9"
)

var watchScript = goredis.NewScript(Compose("watch.lua"))

// Watch registers a watcher of the lock k for its current holder's
// release, in one round trip: the release that frees it publishes its
// wake-up on k.Channel. A release publishes only for a lock so marked —
// by Watch, by a busy acquire attempt (a waiter attempts again after each
// wake-up or timer, so it marks each holder it finds) or by Inspect (each
// look of Election.Observe) — so a release nobody waits for costs no
// PUBLISH. A free lock is not marked. Call it after the subscription to
// k.Channel is confirmed, so that no release between the two is missed.
func Watch(ctx context.Context, c goredis.Scripter, k Keys) error {
	return watchScript.Run(ctx, c, []string{k.Lock}).Err()
}
