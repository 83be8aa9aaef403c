package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/require"
)

// TestDoFnPanicReleases: fn panics inside Do or TryDo and the caller
// recovers (a job runner that turns panics into failed runs). The lock
// must not stay taken, auto-refreshed for as long as the process lives,
// by a job that no longer runs: another owner gets it at once.
func TestDoFnPanicReleases(t *testing.T) {
	a, b := openTwo(t, redisURL(t))
	for _, c := range []struct {
		name string
		run  func(key string)
	}{
		{"Do", func(key string) {
			_ = a.Do(t.Context(), key, func(context.Context) error { panic("job bug") }, distlock.WithTTL(3*time.Second))
		}},
		{"TryDo", func(key string) {
			_, _ = a.TryDo(t.Context(), key, func(context.Context) error { panic("job bug") }, distlock.WithTTL(3*time.Second))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			func() {
				defer func() {
					if recover() == nil {
						t.Fatal("the panic was not passed on")
					}
				}()
				c.run(c.name)
			}()
			// Longer than several TTLs: an auto-refreshed orphan would
			// still hold the key.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			lease, err := b.Acquire(ctx, c.name)
			require.NoError(t, err, "after fn panicked under the lock")
			_ = lease.Release(t.Context())
		})
	}
}
