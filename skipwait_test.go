package distlock_test

import (
	"context"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/stretchr/testify/require"
)

// skipDriver is a memory session with a Blocker that waits natively for
// nothing (ErrSkip) and a Notifier that announces nothing (a nil channel):
// the shape of a driver whose native wait or announcements cover only some
// requests (memory: locks queue, permits are announced; PostgreSQL with
// notify: locks announced, permits not).
type skipDriver struct {
	backend.Driver
	pm                      backend.Permitter
	tries, skips, watches   atomic.Int32
	permitReqs, permitLooks atomic.Int32 // requests and Watch calls with Permits set
}

func (d *skipDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	d.tries.Add(1)
	if req.Permits > 0 {
		d.permitReqs.Add(1)
	}
	return d.Driver.TryAcquire(ctx, req)
}

func (d *skipDriver) Acquire(context.Context, backend.Request) (backend.Lock, error) {
	d.skips.Add(1)
	return nil, backend.ErrSkip
}

func (d *skipDriver) Watch(_ context.Context, req backend.Request) (<-chan struct{}, func()) {
	d.watches.Add(1)
	if req.Permits > 0 {
		d.permitLooks.Add(1)
	}
	return nil, nil
}

func (d *skipDriver) PermitCapabilities() (backend.Capabilities, error) {
	return d.pm.PermitCapabilities()
}

func newSkipDriver(t *testing.T) *skipDriver {
	open, err := backend.Lookup("mem")
	require.NoError(t, err)
	d, err := open(t.Context(), &url.URL{Scheme: "mem", Host: t.Name()})
	require.NoError(t, err)
	return &skipDriver{Driver: d, pm: d.(backend.Permitter)}
}

// TestWaitWithoutNativeWaitOrAnnouncement: a Blocker's ErrSkip sends the
// wait to distlock's own loop, and a Watch that returns a nil channel is
// asked once per wait, which then polls: the waiter gets the lock, and the
// permit, once the holder gives it back.
func TestWaitWithoutNativeWaitOrAnnouncement(t *testing.T) {
	d := newSkipDriver(t)
	l := distlock.New(d, "skip")
	defer l.Close()
	sem, err := l.Semaphore("sem", 1)
	require.NoError(t, err)
	for _, c := range []struct {
		name    string
		acquire func(context.Context, ...distlock.Option) (*distlock.Lease, error)
	}{
		{"lock", func(ctx context.Context, opts ...distlock.Option) (*distlock.Lease, error) {
			return l.Acquire(ctx, "lock", opts...)
		}},
		{"permit", sem.Acquire},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			held, err := c.acquire(ctx)
			require.NoError(t, err)
			skips, watches, tries := d.skips.Load(), d.watches.Load(), d.tries.Load()
			go func() {
				time.Sleep(100 * time.Millisecond)
				_ = held.Release(context.Background())
			}()
			waiter, err := c.acquire(ctx, distlock.WithRetry(distlock.Backoff{Min: 10 * time.Millisecond, Max: 10 * time.Millisecond}))
			require.NoError(t, err, "the waiter after the holder released")
			defer waiter.Release(context.Background())
			require.Equal(t, int32(1), d.skips.Load()-skips, "Blocker.Acquire calls: one, answered ErrSkip")
			require.Equal(t, int32(1), d.watches.Load()-watches, "Watch calls: one per wait, answered nil")
			require.GreaterOrEqual(t, d.tries.Load()-tries, int32(3), "the wait polled TryAcquire")
		})
	}
	require.Positive(t, d.permitReqs.Load(), "permit requests reach TryAcquire with Permits set")
	require.Positive(t, d.permitLooks.Load(), "permit waits reach Watch with Permits set")
}
