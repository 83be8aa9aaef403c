package gocronlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/gocronlock"
)

// TestUnlockAfterJobCtxEnded: gocron calls Unlock with the job's ctx,
// which has ended when the scheduler shuts down or the job is removed
// while it runs. Unlock must still free the lock (or, within a minimum
// hold, set it to expire when the hold ends) before it returns: the lock
// is free for the next scheduler at once, not after a background retry or
// its TTL.
func TestUnlockAfterJobCtxEnded(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { unlockAfterJobCtxEnded(t, b.url(t)) })
	}
}

func unlockAfterJobCtxEnded(t *testing.T, url string) {
	l, other := open(t, url), open(t, url)
	gl, err := gocronlock.NewLocker(l, "job:", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	lock, err := gl.Lock(ctx, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	cancel() // scheduler shut down while the job ran
	if err := lock.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with the job's ended ctx: %v, want the lock released", err)
	}
	lease, err := other.TryAcquire(t.Context(), "job:nightly")
	if err != nil {
		t.Fatalf("after Unlock with the job's ended ctx: %v, want the lock free", err)
	}
	_ = lease.Release(t.Context())
}
