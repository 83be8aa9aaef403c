package memcached

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
)

const (
	// undoSettle is how long the background cleanup of an acquisition
	// with an unknown outcome keeps looking for the record after the
	// server first answered that it is not there: a request still queued
	// on a connection the server has not read yet may land late.
	undoSettle = 2 * time.Second
	// undoFirstPause and undoMaxPause space the cleanup's tries.
	undoFirstPause = 20 * time.Millisecond
	undoMaxPause   = time.Second
)

// undo removes one hold in the background, for an acquisition of unknown
// outcome and for a release that could not reach the server. It retries
// until the hold is gone or proven absent, the TTL has run out, or Close,
// which leaves one last try.
func (d *driver) undo(key string, h holdRef, ttl time.Duration) {
	d.g.GoChild(func() {
		var answered time.Time // the first "not there"
		async.Retry{
			Schedule:   async.Backoff{First: undoFirstPause, Max: undoMaxPause},
			Within:     ttl + 2*ExpiryGranularity,
			TryTimeout: 3 * d.timeout,
			Quit:       d.g.Quit(),
		}.Do(context.Background(), func(ctx context.Context) bool {
			err := d.removeHold(ctx, key, h)
			switch {
			case err == nil, errors.Is(err, syscall.ECONNREFUSED):
				return true
			case errors.Is(err, backend.ErrNotHeld):
				if answered.IsZero() {
					answered = time.Now()
				}
				return time.Since(answered) >= undoSettle
			case ioError(err):
				d.flushIdle()
			}
			return false
		})
	})
}
