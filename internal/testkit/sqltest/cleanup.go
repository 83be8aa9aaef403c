package sqltest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/sqllock"
)

// KeysInBucket returns n distinct keys with prefix whose fence-floor
// bucket (sqllock.Bucket) is bucket.
func KeysInBucket(prefix string, bucket, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("%s/%d", prefix, i)
		if sqllock.Bucket(k) == bucket {
			keys = append(keys, k)
		}
	}
	return keys
}

// AcquireRelease takes key with TryAcquire, releases it and returns its
// token; an error fails t.
func AcquireRelease(t testing.TB, ctx context.Context, l *distlock.Locker, key string) uint64 {
	t.Helper()
	lease, err := l.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", key, err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return lease.Token()
}

// CleanupRace runs 6 workers acquiring and releasing 6 keys of two floor
// buckets (60 times each) on lockers while one goroutine per locker runs
// cleanup(ctx, i) in a loop (at most 2000 times), and checks that every
// key's tokens, in the order the holders got them, strictly increase.
func CleanupRace(t *testing.T, ctx context.Context, lockers []*distlock.Locker, cleanup func(ctx context.Context, i int) error) {
	keys := append(KeysInBucket("race", 11, 3), KeysInBucket("race", 12, 3)...)
	var mu sync.Mutex
	tokens := map[string][]uint64{}
	stop := make(chan struct{})
	var cleaners sync.WaitGroup
	for i := range lockers {
		cleaners.Go(func() {
			for range 2000 {
				select {
				case <-stop:
					return
				default:
				}
				if err := cleanup(ctx, i); err != nil && ctx.Err() == nil {
					t.Errorf("cleanup: %v", err)
					return
				}
			}
		})
	}
	var workers sync.WaitGroup
	for w := range 6 {
		l := lockers[w%len(lockers)]
		workers.Go(func() {
			for i := range 60 {
				key := keys[(w+i)%len(keys)]
				lease, err := l.Acquire(ctx, key, distlock.WithTTL(10*time.Second))
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				mu.Lock()
				tokens[key] = append(tokens[key], lease.Token())
				mu.Unlock()
				if err := lease.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	workers.Wait()
	close(stop)
	cleaners.Wait()
	for k, ts := range tokens {
		for i := 1; i < len(ts); i++ {
			if ts[i] <= ts[i-1] {
				t.Errorf("key %s: token %d after %d (tokens %v)", k, ts[i], ts[i-1], ts)
				break
			}
		}
	}
}

// CleanupKeepsTokens checks a cleanup on l (any mode with one): of three keys of one
// floor bucket, the first is locked five times and left free, the second
// is held; cleanup (which must delete every free row) deletes exactly one
// row, rows (the lease rows left) is then 1, the held lock still
// refreshes, and both the first key locked again and the never-locked
// third key get tokens above the first's last.
func CleanupKeepsTokens(t *testing.T, ctx context.Context, l *distlock.Locker, cleanup func() (int, error), rows func() int) {
	t.Helper()
	keys := KeysInBucket("cleanup", 7, 3)
	var last uint64
	for range 5 {
		last = AcquireRelease(t, ctx, l, keys[0])
	}
	held, err := l.TryAcquire(ctx, keys[1], distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(ctx) }()
	if n, err := cleanup(); err != nil || n != 1 {
		t.Fatalf("cleanup deleted %d rows (%v), want 1: the free one", n, err)
	}
	if n := rows(); n != 1 {
		t.Errorf("%d lease rows after cleanup, want 1 (the held one)", n)
	}
	if err := held.Refresh(ctx, time.Minute); err != nil {
		t.Errorf("the held lock after cleanup: %v", err)
	}
	if tok := AcquireRelease(t, ctx, l, keys[0]); tok <= last {
		t.Errorf("token %d after the row was deleted, the last before %d", tok, last)
	}
	if tok := AcquireRelease(t, ctx, l, keys[2]); tok <= last {
		t.Errorf("a new key of the bucket got token %d, the bucket issued %d", tok, last)
	}
}

// MeasureRowsLeft locks n distinct keys once each for a moment
// (TryAcquire+Release, 16 workers, at most 15 minutes), and logs the
// lease rows left (rows), then again after cleanup (which reports the rows
// it deleted).
func MeasureRowsLeft(t *testing.T, ctx context.Context, l *distlock.Locker, n int, rows func() int, cleanup func() int) {
	var next, fails atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && time.Since(start) < 15*time.Minute; i = next.Add(1) {
				lease, err := l.TryAcquire(ctx, fmt.Sprintf("measure/%d", i))
				if err == nil {
					err = lease.Release(ctx)
				}
				if err != nil && fails.Add(1) < 5 {
					t.Logf("lock %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d locks in %v, %d failures; lease rows left: %d", n, time.Since(start).Round(time.Millisecond), fails.Load(), rows())
	cstart := time.Now()
	deleted := cleanup()
	t.Logf("forced cleanup: deleted %d in %v; lease rows left: %d", deleted, time.Since(cstart).Round(time.Millisecond), rows())
}

// TokenAfterCommit starts l.Acquire(key) in the background, waits until
// waiting reports it queued behind the caller's open transaction (polled
// every poll, at most 10s; an error if never), runs commit, and returns
// the token the acquisition then got.
func TokenAfterCommit(t *testing.T, ctx context.Context, l *distlock.Locker, key string, poll time.Duration, waiting func() bool, commit func() error) uint64 {
	t.Helper()
	got := make(chan uint64, 1)
	go func() {
		lease, err := l.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
			got <- 0
			return
		}
		_ = lease.Release(ctx)
		got <- lease.Token()
	}()
	queued := false
	for deadline := time.Now().Add(10 * time.Second); !queued && time.Now().Before(deadline); {
		time.Sleep(poll)
		queued = waiting()
	}
	if !queued {
		t.Error("the acquisition did not wait for the open transaction")
	}
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	return <-got
}
