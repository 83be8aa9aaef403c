package election_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestElectionCrowd: 1,000 candidates (over a few Lockers, as a fleet's
// processes would) Lead one key; each leads one term and returns. At no
// instant do two fns run at once, tokens rise with every term, every
// candidate leads exactly once, all of it within a bound, and no goroutine
// is left once every Lead has returned and the Lockers are closed.
func TestElectionCrowd(t *testing.T) {
	for _, b := range candidateBackends {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			if testing.Short() {
				t.Skip("1,000 candidates")
			}
			base := runtime.NumGoroutine()
			const candidates, lockers = 1000, 4
			ls := make([]*distlock.Locker, lockers)
			for i := range ls {
				l, err := distlock.Open(t.Context(), url)
				require.NoError(t, err)
				ls[i] = l
			}
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			var (
				leading atomic.Int32
				mu      sync.Mutex
				last    uint64
				terms   int
				errs    []string
				wg      sync.WaitGroup
				start   = make(chan struct{})
			)
			fail := func(format string, a ...any) {
				mu.Lock()
				if len(errs) < 10 {
					errs = append(errs, fmt.Sprintf(format, a...))
				}
				mu.Unlock()
			}
			for c := range candidates {
				e := election(t, ls[c%lockers], "crowd", fmt.Sprintf("c%d", c),
					distlock.WithTermOptions(distlock.WithTTL(10*time.Second)),
					distlock.WithRecampaignBackoff(distlock.Backoff{Min: time.Millisecond, Max: 50 * time.Millisecond}))
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start // every candidate campaigns at once
					err := e.Lead(ctx, func(tctx context.Context, term *distlock.Term) error {
						if n := leading.Add(1); n != 1 {
							fail("%d leaders at once", n)
						}
						mu.Lock()
						if term.Token() <= last {
							fail("token %d after %d", term.Token(), last)
						}
						last = term.Token()
						terms++
						mu.Unlock()
						time.Sleep(100 * time.Microsecond) // let the others pile up
						if err := term.Err(); err != nil {
							fail("term ended at once: %v", err)
						}
						leading.Add(-1)
						return nil // done: resign
					})
					if err != nil {
						fail("Lead: %v", err)
					}
				}()
			}
			close(start)
			wg.Wait()
			for _, e := range errs {
				t.Error(e)
			}
			assert.Equal(t, candidates, terms, "%d terms, want %d (one per candidate)", terms, candidates)
			for _, l := range ls {
				_ = l.Close()
			}
			if g := settleGoroutines(base); g > base {
				buf := make([]byte, 1<<16)
				t.Errorf("%d goroutines after every Lead returned and the Lockers closed, %d before:\n%s", g, base, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}
