package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/backend"
)

// ctlDriver is a one-client lock server in a box for tests of the shared
// machinery: it grants every acquisition, applies a refresh the moment it is
// called (as a server would on the request's arrival), keeps each lock's
// server-side expiry, and then delays its reply as told. With hang set,
// every call waits for its ctx to end, as against a backend that stopped
// answering.
type ctlDriver struct {
	hang         atomic.Bool
	refreshDelay func(ttl time.Duration) time.Duration // nil: none

	mu       sync.Mutex
	tokens   uint64
	expires  map[*ctlLock]time.Time
	refreshN map[time.Duration]int // refreshes in flight, by their ttl
	calls    int                   // Refresh calls
	overlaps int                   // Refresh calls begun while another was in flight
	stalls   atomic.Int32          // calls that waited for their ctx
	freed    chan struct{}         // closed by free: stalled calls fail at once
}

func newCtlDriver() *ctlDriver {
	return &ctlDriver{expires: map[*ctlLock]time.Time{}, refreshN: map[time.Duration]int{}, freed: make(chan struct{})}
}

// free makes the calls waiting for their ctx fail at once (the end of a
// test: no goroutine left waiting).
func (d *ctlDriver) free() { close(d.freed) }

type ctlLock struct {
	d     *ctlDriver
	token uint64
}

func (d *ctlDriver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Expiring: true, Fencing: true}
}
func (d *ctlDriver) Close() error { return nil }

// stall waits for ctx if the driver hangs, and reports whether it did.
func (d *ctlDriver) stall(ctx context.Context) error {
	if !d.hang.Load() {
		return nil
	}
	d.stalls.Add(1)
	select {
	case <-ctx.Done():
		return fmt.Errorf("%w: no reply: %w", backend.ErrUnavailable, ctx.Err())
	case <-d.freed:
		return fmt.Errorf("%w: no reply", backend.ErrUnavailable)
	}
}

func (d *ctlDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if err := d.stall(ctx); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tokens++
	l := &ctlLock{d: d, token: d.tokens}
	d.expires[l] = time.Now().Add(req.TTL)
	return l, nil
}

// refreshCalls returns the Refresh calls so far, how many of them began
// while another was in flight, and how many are in flight now.
func (d *ctlDriver) refreshCalls() (calls, overlaps, inflight int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range d.refreshN {
		inflight += n
	}
	return d.calls, d.overlaps, inflight
}

// onlyExpiry returns the server-side expiry of the driver's only lock.
func (d *ctlDriver) onlyExpiry() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, exp := range d.expires {
		return exp
	}
	return time.Time{}
}

func (l *ctlLock) Token() uint64 { return l.token }

func (l *ctlLock) Refresh(ctx context.Context, ttl time.Duration) error {
	d := l.d
	if err := d.stall(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	d.calls++
	for _, n := range d.refreshN {
		if n > 0 {
			d.overlaps++
			break
		}
	}
	if exp := time.Now().Add(ttl); exp.After(d.expires[l]) {
		d.expires[l] = exp
	}
	d.refreshN[ttl]++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.refreshN[ttl]--
		d.mu.Unlock()
	}()
	if d.refreshDelay == nil {
		return nil
	}
	t := time.NewTimer(d.refreshDelay(ttl))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: no reply: %w", backend.ErrUnavailable, ctx.Err())
	}
}

func (l *ctlLock) Release(ctx context.Context) error { return l.d.stall(ctx) }

// policyDriver is a ctlDriver with a TTLPolicy.
type policyDriver struct {
	*ctlDriver
	validity func(time.Duration) time.Duration
}

func (d policyDriver) Validity(ttl time.Duration) (time.Duration, error) {
	return d.validity(ttl), nil
}

func (*ctlDriver) Inspect(context.Context, string) (backend.LockInfo, error) {
	return backend.LockInfo{}, errors.ErrUnsupported
}

func (*ctlDriver) ForceRelease(context.Context, string, backend.Holder) (backend.LockInfo, error) {
	return backend.LockInfo{}, errors.ErrUnsupported
}
