package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/stretchr/testify/require"
)

// failingDriver is a ctlDriver whose refreshes fail with fail's error once
// it is set, as against a backend that refuses connections.
type failingDriver struct {
	*ctlDriver
	fail atomic.Pointer[error]
}

type failingLock struct {
	backend.Lock
	d *failingDriver
}

func (d *failingDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	l, err := d.ctlDriver.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return failingLock{l, d}, nil
}

func (l failingLock) Refresh(ctx context.Context, ttl time.Duration) error {
	if e := l.d.fail.Load(); e != nil {
		return *e
	}
	return l.Lock.Refresh(ctx, ttl)
}

// logRecords is a slog handler that keeps every record.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
	return nil
}
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecords) WithGroup(string) slog.Handler      { return h }

// warnings returns the messages of the Warn records, in order.
func (h *logRecords) warnings() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Level == slog.LevelWarn {
			out = append(out, r.Message)
		}
	}
	return out
}

// lostAfterRefreshFailure acquires a lease of ttl on d, lets breakRefresh
// make its refreshes fail, and returns the lease's end error and the
// Warn messages logged through WithLogger.
func lostAfterRefreshFailure(t *testing.T, d backend.Driver, ttl time.Duration, breakRefresh func()) (error, []string) {
	t.Helper()
	logs := &logRecords{}
	l := distlock.New(d, "ctl", distlock.WithLogger(slog.New(logs)))
	lease, err := l.TryAcquire(context.Background(), "k", distlock.WithTTL(ttl))
	require.NoError(t, err)
	breakRefresh()
	select {
	case <-lease.Done():
	case <-time.After(slack.D(10 * ttl)):
		t.Fatal("lease not lost")
	}
	// Close waits for a refresh still in flight at the loss.
	require.NoError(t, l.Close())
	return lease.Err(), logs.warnings()
}

// TestLostLeaseSaysWhy: a lease lost because its refreshes failed says why
// they failed: the last refresh's backend error, or that the refresh in
// flight had no answer.
func TestLostLeaseSaysWhy(t *testing.T) {
	const ttl = 600 * time.Millisecond
	refused := fmt.Errorf("%w: dial tcp 127.0.0.1:1: connect: connection refused", backend.ErrUnavailable)
	fd := &failingDriver{ctlDriver: newCtlDriver()}
	err, _ := lostAfterRefreshFailure(t, fd, ttl, func() { fd.fail.Store(&refused) })
	t.Logf("refused: %v", err)
	if !errors.Is(err, distlock.ErrLockLost) || distlock.Cause(err) != "expired" || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("refreshes refused: lease error %q (cause %s); want ErrLockLost, expired, and why: connection refused", err, distlock.Cause(err))
	}

	cd := newCtlDriver()
	defer cd.free()
	err, _ = lostAfterRefreshFailure(t, cd, ttl, func() { cd.hang.Store(true) })
	t.Logf("unanswered: %v", err)
	if !errors.Is(err, distlock.ErrLockLost) || distlock.Cause(err) != "expired" || !strings.Contains(err.Error(), "no answer") {
		t.Errorf("refresh unanswered: lease error %q (cause %s); want ErrLockLost, expired, and why: no answer", err, distlock.Cause(err))
	}
}

// TestRefreshFailureWarnedBeforeLoss: the logger hears of failing
// automatic refreshes once, when they first fail (or first go unanswered),
// before the lease is lost, and hears nothing of a refresh after the loss.
func TestRefreshFailureWarnedBeforeLoss(t *testing.T) {
	const ttl = 900 * time.Millisecond
	check := func(name string, warns []string) {
		t.Helper()
		var refresh, lost []int
		for i, m := range warns {
			switch {
			case strings.Contains(m, "refresh"):
				refresh = append(refresh, i)
			case strings.Contains(m, "lease lost"):
				lost = append(lost, i)
			}
		}
		if len(refresh) != 1 || len(lost) != 1 || refresh[0] > lost[0] {
			t.Errorf("%s: warnings %q; want one refresh warning, then one lease lost", name, warns)
		}
	}
	refused := fmt.Errorf("%w: dial tcp 127.0.0.1:1: connect: connection refused", backend.ErrUnavailable)
	fd := &failingDriver{ctlDriver: newCtlDriver()}
	_, warns := lostAfterRefreshFailure(t, fd, ttl, func() { fd.fail.Store(&refused) })
	check("refreshes refused", warns)

	cd := newCtlDriver()
	defer cd.free()
	_, warns = lostAfterRefreshFailure(t, cd, ttl, func() { cd.hang.Store(true) })
	check("refresh unanswered", warns)
}
