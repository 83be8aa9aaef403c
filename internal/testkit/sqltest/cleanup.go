package sqltest

import (
	"context"
	"fmt"
	"sync"
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
func AcquireRelease(t testing.TB, ctx context.Context, l distlock.Locker, key string) uint64 {
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
func CleanupRace(t *testing.T, ctx context.Context, lockers []distlock.Locker, cleanup func(ctx context.Context, i int) error) {
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
