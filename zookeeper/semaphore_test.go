package zookeeper

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestSemaphoreAdmissionReleasedBeforeReturn: an acquisition of a permit
// gives its admission lock back before it returns, so that a TryAcquire
// right after it — here after one refused for its count — is not found
// busy by a leftover admission lock of another session.
func TestSemaphoreAdmissionReleasedBeforeReturn(t *testing.T) {
	conformance.Parallel(t)
	srv := standalone(t)
	base := uniqueBase(t)
	a := dialT(t, []string{srv.Addr()}, WithBasePath(base))
	b := dialT(t, []string{srv.Addr()}, WithBasePath(base))
	c := dialT(t, []string{srv.Addr()}, WithBasePath(base)) // another session: no ordering with b's requests
	ctx := ctxT(t, time.Minute)
	held, err := a.Semaphore("adm", 3)
	if err != nil {
		t.Fatal(err)
	}
	first, err := held.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(ctx)
	wrong, _ := c.Semaphore("adm", 2)
	right, _ := b.Semaphore("adm", 3)
	for i := range 10 {
		if _, err := wrong.TryAcquire(ctx); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Fatalf("round %d: another count: %v, want ErrInvalidOption", i, err)
		}
		p, err := right.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("round %d: TryAcquire right after a refused one: %v", i, err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPermitWaiterCancelledWhileCutOffReturnsPromptly: a permit wait
// cancelled while its server does not answer returns promptly (neither the
// delete of its lease node nor the release of its admission lock may hold
// the caller), and both nodes go once the server answers again.
func TestPermitWaiterCancelledWhileCutOffReturnsPromptly(t *testing.T) {
	conformance.Parallel(t)
	needControl(t)
	srv := standalone(t)
	base, fw := uniqueBase(t), &faults{}
	holder := dialT(t, []string{srv.Addr()}, WithBasePath(base))
	waiting := make(chan struct{}, 1)
	hooks := &testHooks{permitWait: func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}}
	waiter := dialT(t, []string{srv.Addr()}, WithBasePath(base), WithDialer(fw.dial), WithSessionTimeout(20*time.Second), withHooks(hooks))
	admin := adminConn(t, srv.Addr())
	warm(t, waiter)
	hs, err := holder.Semaphore("p", 1)
	require.NoError(t, err)
	held, err := hs.Acquire(ctxT(t, 30*time.Second))
	require.NoError(t, err)
	defer func() { _ = held.Release(ctxT(t, 10*time.Second)) }()
	leases := func() int { return len(lockNodes(t, admin, base, semLeaseKey+"p")) }

	ws, err := waiter.Semaphore("p", 1)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := ws.Acquire(wctx)
		done <- err
	}()
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("the permit waiter did not wait: %v", err)
	case <-time.After(slack.D(20 * time.Second)):
		t.Fatal("the permit waiter did not start waiting for the leases")
	}
	require.Equal(t, 2, leases(), "the holder's lease node and the waiter's")

	fw.setBlackhole(true)
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, distlock.ErrNotAcquired)
		took, most := time.Since(start), slack.D(500*time.Millisecond)
		t.Logf("Acquire returned %v after its ctx was cancelled", took)
		if took > most {
			t.Errorf("Acquire returned %v after its ctx was cancelled, want at most %v", took, most)
		}
	case <-time.After(slack.D(30 * time.Second)):
		t.Fatal("Acquire did not return after its ctx was cancelled")
	}
	// The heal resets the connection, as the end of a real partition
	// would, so that requests the blackhole swallowed are sent again.
	fw.setBlackhole(false)
	fw.cutNow(0)
	waitFor(t, slack.D(20*time.Second), "the waiter's lease node and admission lock deleted", func() bool {
		return leases() == 1 && len(lockNodes(t, admin, base, semLockKey+"p")) == 0
	})
}
