package election_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCloseEndsEveryCandidateAndObserver: candidates lead, wait, or back
// off, and observers poll, when every Locker is closed (ctx still live):
// each Lead returns ErrClosed, each Observe channel closes, and no
// goroutine is left.
func TestCloseEndsEveryCandidateAndObserver(t *testing.T) {
	for _, b := range candidateBackends {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			base := runtime.NumGoroutine()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			var (
				ls   []*distlock.Locker
				wg   sync.WaitGroup
				mu   sync.Mutex
				errs []error
			)
			for c := range 10 {
				l, err := distlock.Open(ctx, url)
				require.NoError(t, err)
				ls = append(ls, l)
				e := election(t, l, "leader", fmt.Sprintf("c%d", c), distlock.WithObserveInterval(5*time.Millisecond),
					distlock.WithRecampaignBackoff(distlock.Backoff{Min: time.Millisecond, Max: 20 * time.Millisecond}))
				wg.Add(2)
				go func() {
					defer wg.Done()
					err := e.Lead(ctx, func(tctx context.Context, _ *distlock.Term) error {
						<-tctx.Done() // lead until the term ends
						return tctx.Err()
					})
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}()
				go func() {
					defer wg.Done()
					for range e.Observe(ctx) {
					}
				}()
			}
			time.Sleep(300 * time.Millisecond)
			for _, l := range ls {
				_ = l.Close()
			}
			wg.Wait()
			require.NoError(t, ctx.Err(), "candidates or observers ran until ctx ended, not until Close")
			for _, err := range errs {
				assert.ErrorIs(t, err, distlock.ErrClosed, "Lead after Close")
			}
			if g := settleGoroutines(base); g > base {
				buf := make([]byte, 1<<16)
				t.Errorf("%d goroutines after Close, %d before:\n%s", g, base, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}
