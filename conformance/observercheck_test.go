package conformance_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
)

// lateGrant makes the observer check's timed-out Acquire leave an attempt on
// its way: the attempt lands right after the holder's Release, is granted,
// and is given back by the driver a second later, as a backend's in-flight
// request is. The holder's Release returns only once the late grant has
// landed, so the check's next acquisition always meets it.
type lateGrant struct {
	mu       sync.Mutex
	polls    int           // attempts of the timed-out Acquire
	released chan struct{} // closed by the holder's Release
	landed   chan struct{} // closed when the late attempt was granted
	once     sync.Once
}

func (g *lateGrant) try(ctx context.Context, req backend.Request, d backend.Driver) (backend.Lock, error) {
	if !strings.Contains(req.Key, "observed") {
		return d.TryAcquire(ctx, req)
	}
	poll := 0
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < time.Second {
		g.mu.Lock()
		g.polls++
		poll = g.polls
		g.mu.Unlock()
	}
	if poll == 1 {
		// Busy, with the next attempt due soon.
		if _, err := d.TryAcquire(ctx, req); err == nil {
			return nil, errors.New("the rival's first attempt was granted")
		}
		return nil, backend.Busy(10 * time.Millisecond)
	}
	if poll != 2 {
		lk, err := d.TryAcquire(ctx, req)
		if err != nil {
			return nil, err
		}
		return &releaseHook{Lock: lk, g: g}, nil
	}
	// The Acquire's second attempt is on its way when the Acquire's ctx
	// ends, and lands once the holder has released: granted, it is given
	// back a second later, as a driver undoes an attempt whose answer its
	// caller no longer waited for.
	go func() {
		select {
		case <-g.released:
		case <-time.After(20 * time.Second):
			return
		}
		lk, err := d.TryAcquire(context.Background(), req)
		close(g.landed)
		if err == nil {
			time.Sleep(time.Second)
			_ = lk.Release(context.Background())
		}
	}()
	<-ctx.Done()
	return nil, ctx.Err()
}

type releaseHook struct {
	backend.Lock
	g *lateGrant
}

func (r *releaseHook) Release(ctx context.Context) error {
	err := r.Lock.Release(ctx)
	r.g.once.Do(func() {
		close(r.g.released)
		select {
		case <-r.g.landed:
		case <-time.After(10 * time.Second):
		}
	})
	return err
}

// The observer check's acquisition after the release waits out a late
// grant of the rival's timed-out Acquire (which a backend gives back in
// the background, see the request-in-flight checks) instead of requiring
// the lock free at once.
func TestObserverCheckWaitsOutLateGrant(t *testing.T) {
	g := &lateGrant{released: make(chan struct{}), landed: make(chan struct{})}
	ns := memName(t.Name())
	h := conformance.Harness{
		Name: "late-grant",
		NewLocker: func(context.Context) (*distlock.Locker, error) {
			return distlock.New(&broken{Driver: memDriver(t, ns), tryWrap: g.try}, "late-grant"), nil
		},
		// Long enough that the holder is not refreshed while the rival
		// waits (the check expects no refresh event there).
		TTL: 2 * time.Second,
	}
	res := conformance.RunChecks(t.Context(), h, conformance.Options{Match: mustRe("^observer$")})
	if len(res) != 1 || res[0].Status != conformance.Pass {
		t.Fatalf("observer check with a late grant: %+v", res)
	}
	select {
	case <-g.landed:
	default:
		t.Fatal("the late attempt never landed: the test did not make the case it is about")
	}
}
