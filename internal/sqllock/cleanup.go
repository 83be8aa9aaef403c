package sqllock

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"time"

	"github.com/distlock/distlock/backend"
)

// The fencing-record bound. A lease row keeps its key's fence between
// tenures, so a table that never forgot a row would grow by one row per
// distinct key ever locked. Cleanup deletes rows of locks free for longer
// than a grace period; before a row goes, its bucket's floor (one of
// FloorBuckets fixed rows, by the key's SHA-256) is raised to at least the
// row's fence in the same transaction, and a new row's first fence is its
// bucket's floor + 1. So the tokens of one key stay strictly increasing
// across deletions. The driver supplies one pass (its SQL); the loop here
// runs it in the background, bounded.

// FloorBuckets is the number of fence-floor rows.
const FloorBuckets = 1024

// Bucket is the floor bucket of a key: the first bits of its SHA-256.
func Bucket(key string) int {
	h := sha256.Sum256([]byte(key))
	return BucketOfHash(h)
}

// BucketOfHash is Bucket of a key's SHA-256.
func BucketOfHash(h [32]byte) int { return (int(h[0])<<8 | int(h[1])) % FloorBuckets }

// Cleanup is the policy of the background deletion of free lease rows.
type Cleanup struct {
	// Interval between runs; 0 disables cleanup.
	Interval time.Duration
	// Grace: a row is deleted once its lock has been free (expired) for
	// longer; a released row is free at once.
	Grace time.Duration
	// Batch is the most rows one pass deletes (one transaction).
	Batch int
}

// Cleanup defaults.
const (
	DefaultCleanupInterval = time.Minute
	DefaultCleanupGrace    = 10 * time.Minute
	DefaultCleanupBatch    = 500
	// maxPasses bounds the passes of one run: a run deletes at most
	// maxPasses × Batch rows.
	maxPasses = 20
	// passTimeout bounds one pass.
	passTimeout = 30 * time.Second
)

// DefaultCleanup is the policy of a Locker without WithCleanup.
var DefaultCleanup = Cleanup{Interval: DefaultCleanupInterval, Grace: DefaultCleanupGrace, Batch: DefaultCleanupBatch}

// SetCleanup sets the cleanup policy: interval 0 disables it; otherwise
// interval and batch must be positive and grace not negative.
func (c *Config) SetCleanup(interval, grace time.Duration, batch int) {
	switch {
	case interval < 0:
		c.Fail("WithCleanup", interval, "interval must not be negative (0 disables cleanup)")
	case grace < 0:
		c.Fail("WithCleanup", grace, "grace must not be negative")
	case interval > 0 && (batch < 1 || batch > 100_000):
		c.Fail("WithCleanup", batch, "batch must be in [1, 100000]")
	default:
		c.Cleanup = Cleanup{Interval: interval, Grace: grace, Batch: batch}
	}
}

// Pass deletes at most batch rows free for longer than grace, raising the
// floors first, and reports how many it deleted.
type Pass func(ctx context.Context, grace time.Duration, batch int) (int, error)

// StartCleanup runs pass in the background every c.Interval (jittered by up
// to a quarter, so processes do not align), until Close: each run repeats
// the pass while it deletes a full batch, at most maxPasses times. A failed
// pass ends the run; the next run tries again. It is started once, by the
// first call; it does nothing when c.Interval is 0.
func (b *Base) StartCleanup(c Cleanup, pass Pass) {
	if c.Interval <= 0 || !b.cleanupStarted.CompareAndSwap(false, true) {
		return
	}
	b.Go(func(life context.Context) {
		for {
			wait := c.Interval + time.Duration(rand.Int64N(int64(c.Interval)/4+1))
			t := time.NewTimer(wait)
			select {
			case <-life.Done():
				t.Stop()
				return
			case <-t.C:
			}
			_, _ = RunCleanup(life, c, pass)
		}
	})
}

// RunCleanup runs passes until one deletes less than a batch, at most
// maxPasses, and returns the rows deleted.
func RunCleanup(ctx context.Context, c Cleanup, pass Pass) (int, error) {
	total := 0
	for range maxPasses {
		pctx, cancel := context.WithTimeout(ctx, passTimeout)
		n, err := pass(pctx, c.Grace, c.Batch)
		cancel()
		total += n
		if err != nil || n < c.Batch {
			return total, err
		}
	}
	return total, nil
}

// CleanupParams reads the URL parameters of the cleanup policy, for a
// driver's WithCleanup: cleanup_interval (a Go duration up to 24h; 0
// disables cleanup), cleanup_grace (a Go duration up to 30 days) and
// cleanup_batch (1 to 100000), each defaulting to DefaultCleanup's.
func CleanupParams(p *backend.Params) (interval, grace time.Duration, batch int) {
	interval = backend.Parse(p, "cleanup_interval", DefaultCleanupInterval, backend.DurationIn(0, 24*time.Hour))
	grace = backend.Parse(p, "cleanup_grace", DefaultCleanupGrace, backend.DurationIn(0, 30*24*time.Hour))
	batch = backend.Parse(p, "cleanup_batch", DefaultCleanupBatch, backend.IntIn(1, 100_000))
	return interval, grace, batch
}
