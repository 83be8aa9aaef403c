package distlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/memory"
	"github.com/stretchr/testify/require"
)

// TestAutoRefreshCreditedWithItsOwnTTL (issue 14, defect 1): a manual
// Refresh with a long TTL completes while an automatic refresh sent later
// with the old, short TTL is in flight. The automatic one must be credited
// with the validity it asked for, so the lease's deadline never passes the
// server's expiry.
func TestAutoRefreshCreditedWithItsOwnTTL(t *testing.T) {
	const ttl, long = 900 * time.Millisecond, 3 * time.Second
	d := newCtlDriver()
	d.refreshDelay = func(time.Duration) time.Duration { return 500 * time.Millisecond }
	l := distlock.New(d, "ctl")
	defer l.Close()
	ctx := context.Background()
	lease, err := l.TryAcquire(ctx, "k", distlock.WithTTL(ttl))
	require.NoError(t, err)
	// The manual refresh is in flight from +0 to +500ms; the automatic
	// one, due at +300ms with the old ttl, from +300ms to +800ms. At
	// +650ms the backend stops answering (a partition): later refreshes
	// do not reach it.
	partition := time.AfterFunc(650*time.Millisecond, func() { d.hang.Store(true) })
	defer partition.Stop()
	require.NoError(t, lease.Refresh(ctx, long))
	waitFor(t, 5*time.Second, "automatic refresh done", func() bool {
		calls, _, inflight := d.refreshCalls()
		return calls >= 2 && inflight == 0 && d.hang.Load()
	})
	require.NoError(t, lease.Err(), "lease lost")
	if dl, exp := lease.Deadline(), d.onlyExpiry(); dl.After(exp) {
		t.Fatalf("lease deadline %v after the server's expiry: the lease would say held while the server has freed the lock", dl.Sub(exp))
	}
}

// TestManualRefreshKeepsAutoInflight (issue 14, defect 1): a manual Refresh
// completing while an automatic refresh is in flight does not clear its
// in-flight mark, so no second automatic refresh of the lease starts
// before the first has answered.
func TestManualRefreshKeepsAutoInflight(t *testing.T) {
	const ttl, short = 900 * time.Millisecond, 150 * time.Millisecond
	d := newCtlDriver()
	d.refreshDelay = func(sent time.Duration) time.Duration {
		if sent == ttl {
			return 500 * time.Millisecond
		}
		return 0
	}
	l := distlock.New(d, "ctl")
	defer l.Close()
	ctx := context.Background()
	lease, err := l.TryAcquire(ctx, "k", distlock.WithTTL(ttl))
	require.NoError(t, err)
	waitFor(t, 5*time.Second, "automatic refresh sent", func() bool {
		calls, _, _ := d.refreshCalls()
		return calls >= 1
	})
	if err := lease.Refresh(ctx, short); err != nil { // answered at once
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "automatic refresh done", func() bool {
		_, _, inflight := d.refreshCalls()
		return inflight == 0
	})
	// Only the manual refresh may have overlapped the automatic one.
	if _, overlaps, _ := d.refreshCalls(); overlaps > 1 {
		t.Fatalf("%d refreshes began while the automatic one was in flight, want 1 (the manual one)", overlaps)
	}
	_ = lease.Release(ctx)
}

// issuedDriver grants every request with a lock issued at one fixed time,
// so that the deadlines of all its leases coincide.
type issuedDriver struct {
	nopDriver
	at time.Time
}

type issuedLock struct {
	nopLock
	at time.Time
}

func (d *issuedDriver) TryAcquire(context.Context, backend.Request) (backend.Lock, error) {
	return &issuedLock{nopLock{d.tokens.Add(1)}, d.at}, nil
}
func (l *issuedLock) IssuedAt() time.Time { return l.at }

// heldAfter reports whether the lease says it is held (by Err, Done or
// Context, whichever kind asks) at or after its deadline, looked at no
// earlier than at.
func heldAfter(ls *distlock.Lease, at time.Time, kind int) bool {
	var held bool
	switch kind % 3 {
	case 0:
		held = ls.Err() == nil
	case 1:
		select {
		case <-ls.Done():
		default:
			held = true
		}
	default:
		held = ls.Context().Err() == nil
	}
	return held && !at.Before(ls.Deadline())
}

// TestNoHeldPastDeadline (issue 14, defect 2): many leases whose deadlines
// coincide are taken off the scheduler's heap together and ended one by
// one; none of them may answer "held" (Err, Done, Context) at or after its
// deadline meanwhile.
func TestNoHeldPastDeadline(t *testing.T) {
	const n, ttl = 20000, 3 * time.Second
	d := &issuedDriver{at: time.Now()}
	l := distlock.New(d, "issued")
	defer l.Close()
	ctx := context.Background()
	var leases []*distlock.Lease
	stopAt := d.at.Add(ttl / 2) // well before the common deadline, however loaded the machine
	for i := 0; i < n && time.Now().Before(stopAt); i++ {
		ls, err := l.TryAcquire(ctx, "k"+itoa(i), distlock.WithTTL(ttl), distlock.WithAutoRefresh(false))
		require.NoError(t, err)
		leases = append(leases, ls)
	}
	if len(leases) < 1000 {
		t.Fatalf("only %d leases acquired in %v", len(leases), ttl/2)
	}
	t.Logf("%d leases with one deadline", len(leases))
	bad, probes := 0, 0
	limit := time.Now().Add(10 * time.Second)
	for left := len(leases); left > 0 && time.Now().Before(limit); {
		left = 0
		for i := len(leases) - 1; i >= 0; i-- { // the scheduler ends them in heap order: look from the other end
			ls := leases[i]
			if ls == nil {
				continue
			}
			now := time.Now()
			if now.Before(ls.Deadline()) {
				left++
				continue
			}
			probes++
			if heldAfter(ls, now, probes) {
				bad++
				left++
				continue
			}
			leases[i] = nil
		}
	}
	if bad > 0 {
		t.Fatalf("%d times a lease said held at or after its deadline (%d looks past the deadline)", bad, probes)
	}
	for _, ls := range leases {
		if ls != nil {
			t.Fatalf("lease %s still held 10s after its deadline", ls.Key())
		}
	}
}

// TestTinyTTLNoHang (issue 14, defect 3): a TTL whose refresh time equals
// its deadline (ttl/3 == ttl - ttl/100 - 2ms at 3045683ns) must not hang
// the scheduler when it runs just before that deadline: the Locker keeps
// answering. Leases acquired back to back make the scheduler run at many
// moments, some in that window.
func TestTinyTTLNoHang(t *testing.T) {
	l := memory.MustNew(memory.NewNamespace()) // closed only if not stuck: Close would hang too
	ctx := context.Background()
	progress := make(chan struct{}, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		limit := time.Now().Add(time.Second)
		for i := 0; i < 20000 && time.Now().Before(limit); i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := l.TryAcquire(ctx, "tiny"+itoa(i), distlock.WithTTL(3045683*time.Nanosecond)); err != nil && !errors.Is(err, distlock.ErrUnavailable) {
				t.Error(err)
				return
			}
			select {
			case progress <- struct{}{}:
			default:
			}
		}
		close(progress)
	}()
	for {
		select {
		case _, ok := <-progress:
			if !ok {
				_ = l.Close()
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatal("TryAcquire blocked for 5s: the scheduler is stuck")
		}
	}
}

// TestRefreshedWhenValidityShort (issue 14, defect 3): a lease whose
// validity is at most ttl/3 is still refreshed before its deadline.
func TestRefreshedWhenValidityShort(t *testing.T) {
	d := policyDriver{newCtlDriver(), func(ttl time.Duration) time.Duration { return ttl / 4 }}
	l := distlock.New(d, "policy")
	defer l.Close()
	ctx := context.Background()
	lease, err := l.TryAcquire(ctx, "k", distlock.WithTTL(4*time.Second))
	require.NoError(t, err)
	waitFor(t, 5*time.Second, "a refresh or the lease's end", func() bool {
		calls, _, _ := d.refreshCalls()
		return calls > 0 || lease.Err() != nil
	})
	if calls, _, _ := d.refreshCalls(); calls == 0 {
		t.Fatalf("lease ended without a refresh (validity ttl/4): %v", lease.Err())
	}
	_ = lease.Release(ctx)
}
