package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/redislua"
)

var _ backend.DelayedReleaser = (*driver)(nil)

// ReleaseAfter implements backend.DelayedReleaser, for a release within a
// minimum hold (distlock.WithMinHold): one script gives up the lease's hold
// and keeps the lock taken by its owner until d from now by the server's
// clock — exactly then when no other hold of the owner is left, sooner
// than the lease's TTL if need be (redislua.ReleaseAfter). A reply lost in
// the network is not undone: either outcome leaves a lock that expires.
func (d *driver) ReleaseAfter(ctx context.Context, bl backend.Lock, dur time.Duration) error {
	l, ok := bl.(*lock)
	if !ok || l.d != d {
		return fmt.Errorf("%w: not a lock of this Locker", backend.ErrNotHeld)
	}
	held, err := redislua.ReleaseAfter(ctx, d.client, l.keys, l.owner, l.token, l.hold, dur)
	if err != nil {
		return redislua.OpError(ctx, err)
	}
	if !held {
		return errNotHeld
	}
	return nil
}
