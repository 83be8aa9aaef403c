package jobs_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestTryDoCrowdRunsOnce: 100 hosts' timers fire at the same instant
// (over 4 clients); with a minimum hold the job runs exactly once, on
// every backend, and every other host reports a skip, not an error.
func TestTryDoCrowdRunsOnce(t *testing.T) {
	for _, b := range everyBackend {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			ls := make([]*distlock.Locker, 4)
			for i := range ls {
				ls[i], _ = openTwo(t, url)
			}
			const hosts = 100
			var (
				runs, skips atomic.Int32
				wg          sync.WaitGroup
				start       = make(chan struct{})
			)
			for h := range hosts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ran, err := ls[h%len(ls)].TryDo(t.Context(), "nightly", func(context.Context) error {
						runs.Add(1)
						return nil
					}, distlock.WithTTL(10*time.Second), distlock.WithMinHold(30*time.Second)) // TTL: a grant within a hundred requests at once on a loaded machine arrives in time
					switch {
					case err != nil:
						t.Errorf("host %d: %v", h, err)
					case !ran:
						skips.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			if runs.Load() != 1 || skips.Load() != hosts-1 {
				t.Errorf("%d runs and %d skips of %d hosts, want 1 and %d", runs.Load(), skips.Load(), hosts, hosts-1)
			}
		})
	}
}
