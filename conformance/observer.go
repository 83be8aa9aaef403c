package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock"
)

// Recorder is a distlock.Observer that keeps every event as one line, for
// checks and tests that assert the sequence a scenario produces.
type Recorder struct {
	mu     sync.Mutex
	events []string
}

var _ distlock.Observer = (*Recorder)(nil)

func (r *Recorder) add(format string, a ...any) {
	r.mu.Lock()
	r.events = append(r.events, fmt.Sprintf(format, a...))
	r.mu.Unlock()
}

// Events returns the events recorded so far, oldest first.
func (r *Recorder) Events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// AcquireStart implements distlock.Observer.
func (r *Recorder) AcquireStart(ctx context.Context, e distlock.AcquireEvent) context.Context {
	r.add("%s-start %s", e.Op, e.Key)
	return ctx
}

// AcquireEnd implements distlock.Observer.
func (r *Recorder) AcquireEnd(_ context.Context, a distlock.AcquireResult) {
	if a.Attempts < 1 || a.Waited < 0 || a.Backend == "" {
		r.add("%s-end %s bad result: attempts %d waited %v backend %q", a.Op, a.Key, a.Attempts, a.Waited, a.Backend)
		return
	}
	r.add("%s-end %s %s", a.Op, a.Key, a.Outcome())
}

// Refreshed implements distlock.Observer.
func (r *Recorder) Refreshed(e distlock.LeaseEvent, _ time.Duration, auto bool, err error) {
	kind := "refresh"
	if auto {
		kind = "auto-refresh"
	}
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	r.add("%s %s %s", kind, e.Key, outcome)
}

// LeaseEnded implements distlock.Observer.
func (r *Recorder) LeaseEnded(e distlock.LeaseEvent, cause error) {
	r.add("ended %s %s", e.Key, distlock.Cause(cause))
}

// ReleaseStart implements distlock.Observer.
func (r *Recorder) ReleaseStart(ctx context.Context, e distlock.LeaseEvent) context.Context {
	r.add("release-start %s", e.Key)
	return ctx
}

// ReleaseEnd implements distlock.Observer.
func (r *Recorder) ReleaseEnd(_ context.Context, e distlock.LeaseEvent, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	r.add("release-end %s %s", e.Key, outcome)
}

// checkObserver runs a scripted scenario — acquire, a refused TryAcquire,
// a timed-out Acquire, a manual refresh, release, a loss by expiry, a lease
// ended by Close — and asserts the exact sequence of Observer events.
func checkObserver(t T, h *Harness) {
	a, b := h.locker(t), h.locker(t)
	rec := &Recorder{}
	obs := distlock.WithObserver(rec)
	key := h.key(t, "observed")
	lease := mustTry(t, a, key, obs)
	want := []string{"try-acquire-start K", "try-acquire-end K acquired"}
	if _, err := b.TryAcquire(ctxFor(t, 10*time.Second), key, obs); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v", err)
	}
	want = append(want, "try-acquire-start K", "try-acquire-end K busy")
	if _, err := b.Acquire(ctxFor(t, 300*time.Millisecond), key, obs); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("Acquire of a held key with a 300ms ctx: %v", err)
	}
	want = append(want, "acquire-start K", "acquire-end K busy")
	if a.Capabilities().Expiring {
		if err := lease.Refresh(ctxFor(t, 10*time.Second), h.ttl()); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		want = append(want, "refresh K ok")
	}
	mustRelease(t, lease)
	want = append(want, "release-start K", "release-end K ok")
	if a.Capabilities().Expiring {
		// Acquire, not TryAcquire: b's Acquire above may have had an
		// attempt on its way when its ctx ended, granted after this
		// release and then given back by b's driver (see the
		// request-in-flight checks); this waits for that.
		lost := mustAcquire(t, a, key, obs, distlock.WithTTL(h.ttl()), distlock.WithAutoRefresh(false))
		waitLost(t, lost, 2*h.ttl()+time.Second)
		want = append(want, "acquire-start K", "acquire-end K acquired", "ended K expired")
	}
	c := h.locker(t)
	mustAcquire(t, c, key, obs) // waits out the server's side of the expiry
	_ = c.Close()
	want = append(want, "acquire-start K", "acquire-end K acquired", "ended K closed")
	got := rec.Events()
	for i := range got {
		got[i] = strings.ReplaceAll(got[i], key, "K")
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("observer events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
