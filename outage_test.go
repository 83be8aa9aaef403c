package distlock_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// outageDriver is a backend that is down: its first acquisition attempt
// is refused (a real dial error of a closed loopback port), and the later
// ones are refused too, or, with hang, get no answer until their ctx ends
// (a dial still under way).
type outageDriver struct {
	*ctlDriver
	refused error
	hang    bool
	upAfter int32 // > 0: the attempts after this many are served
	calls   atomic.Int32
}

func newOutageDriver(t *testing.T, hang bool) *outageDriver {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	_ = ln.Close()
	c, err := net.Dial("tcp", addr)
	if err == nil {
		c.Close()
		t.Skipf("%s accepted a connection", addr)
	}
	return &outageDriver{ctlDriver: newCtlDriver(), refused: backend.Wrap(backend.CodeTransient, err), hang: hang}
}

func (d *outageDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	n := d.calls.Add(1)
	if d.upAfter > 0 && n > d.upAfter {
		return d.ctlDriver.TryAcquire(ctx, req)
	}
	if n > 1 && d.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, d.refused
}

// TestRetryUnavailableKeepsCause: an Acquire with WithRetryUnavailable
// whose ctx ends while the backend is down returns an error that still
// says why the backend was unavailable (the last attempt's "connection
// refused", with the address), whether the ctx ended in a pause between
// attempts or cut an attempt short; it satisfies ErrNotAcquired,
// ErrUnavailable and the ctx error.
func TestRetryUnavailableKeepsCause(t *testing.T) {
	for _, hang := range []bool{false, true} {
		d := newOutageDriver(t, hang)
		l := distlock.New(d, "ctl")
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := l.Acquire(ctx, "k", distlock.WithRetryUnavailable(true))
		cancel()
		l.Close()
		require.Error(t, err, "Acquire while the backend is down: no error")
		for _, want := range []error{distlock.ErrNotAcquired, distlock.ErrUnavailable, context.DeadlineExceeded} {
			if !errors.Is(err, want) {
				t.Errorf("attempt cut short %v: %v: not %v", hang, err, want)
			}
		}
		assert.Contains(t, err.Error(), "connection refused", "attempt cut short %v: %q: the last attempt's cause (connection refused) is lost", hang, err)
	}
}

// TestOutageLogged: an Acquire waiting out an outage with
// WithRetryUnavailable tells the Locker's logger when it starts (Warn,
// with the backend's error) and when the backend answers again (Info), so
// that a CLI's -v can show progress.
func TestOutageLogged(t *testing.T) {
	d := newOutageDriver(t, false)
	d.upAfter = 3
	logs := &logRecords{}
	l := distlock.New(d, "ctl", distlock.WithLogger(slog.New(logs)))
	defer l.Close()
	lease, err := l.Acquire(context.Background(), "k", distlock.WithRetryUnavailable(true))
	require.NoError(t, err)
	_ = lease.Release(context.Background())
	logs.mu.Lock()
	defer logs.mu.Unlock()
	var warned, recovered bool
	for _, r := range logs.recs {
		var errText string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" {
				errText = a.Value.String()
			}
			return true
		})
		switch {
		case r.Level == slog.LevelWarn && strings.Contains(r.Message, "unavailable") && strings.Contains(errText, "connection refused"):
			warned = true
		case r.Level == slog.LevelInfo && strings.Contains(r.Message, "again") && warned:
			recovered = true
		}
	}
	if !warned || !recovered {
		var msgs []string
		for _, r := range logs.recs {
			msgs = append(msgs, r.Level.String()+" "+r.Message)
		}
		t.Errorf("logged %q; want a Warn with the refused dial when the outage began, then an Info when it ended", msgs)
	}
}
