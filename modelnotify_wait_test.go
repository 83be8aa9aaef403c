package distlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/require"
)

// TestWaitRewatchesAfterChannelHeal: a waiter whose Watch fell while the
// notification channel was down got a channel that never fires. Once the
// channel is back, the waiter must be on it again within one notification
// fallback, so that a later release wakes it at once instead of at its next
// fallback round (up to a second later, four times the default retry
// policy's longest delay).
func TestWaitRewatchesAfterChannelHeal(t *testing.T) {
	srv := newNotifyServer()
	d := newNotifyDriver(srv, 0, false)
	watched := make(chan bool, 16)
	d.onWatch = func(registered bool) { watched <- registered }
	l := distlock.New(d, "notify-wait")
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	holder, err := l.TryAcquire(ctx, "k", distlock.WithTTL(time.Minute))
	require.NoError(t, err)
	d.setUp(false)
	got := make(chan error, 1)
	var acquired time.Time
	go func() {
		ls, err := l.Acquire(ctx, "k", distlock.WithTTL(time.Minute))
		acquired = time.Now()
		if err == nil {
			err = ls.Release(ctx)
		}
		got <- err
	}()
	select {
	case registered := <-watched:
		require.False(t, registered, "the waiter's Watch registered on a channel that is down")
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter never watched")
	}
	watchedAt := time.Now()
	d.setUp(true)
	// Release once the waiter is on the channel again, or one and a half
	// fallbacks after its Watch if it never is.
	select {
	case registered := <-watched:
		require.True(t, registered)
	case <-time.After(time.Until(watchedAt.Add(notifyFallbackModel * 3 / 2))):
	}
	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-got)
	require.Less(t, acquired.Sub(released), notifyWake, "the waiter acquired %v after the release (watched during the cut %v before it)", acquired.Sub(released), released.Sub(watchedAt))
}
