package election_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCampaignCancelledWhileGrantInFlight: a candidate's campaign request
// is delayed on its way to Redis (not only the reply), and its ctx ends
// before it arrives; the grant then lands on the server after Campaign
// has returned. The term must not be left behind: another candidate
// becomes leader long before the orphan's one-minute TTL, and the
// cancelled candidate's Locker ends no lease of its own later, and no
// goroutine is left once both Lockers are closed.
func TestCampaignCancelledWhileGrantInFlight(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	p, err := netfault.Listen(srv.Addr())
	require.NoError(t, err)
	defer p.Close()
	base := runtime.NumGoroutine()
	slow := open(t, "redis://"+p.Addr()+"/0")
	fast := open(t, "redis://"+srv.Addr()+"/0")
	opts := distlock.WithTermOptions(distlock.WithTTL(time.Minute))
	a := election(t, slow, "leader", "slow", opts)
	b := election(t, fast, "leader", "fast", opts)
	if _, err := a.Leader(t.Context()); err != nil { // dial before the fault
		t.Fatal(err)
	}
	p.DelayRequests(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	term, err := a.Campaign(ctx)
	cancel()
	if err == nil {
		t.Fatalf("Campaign returned term %d after its ctx ended", term.Token())
	}
	if !errors.Is(err, distlock.ErrNotAcquired) && !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("Campaign cut off: %v, want ErrNotAcquired or ErrUnavailable", err)
	}
	time.Sleep(400 * time.Millisecond) // the delayed request has landed
	bctx, bcancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer bcancel()
	tb, err := b.Campaign(bctx)
	if err != nil {
		info, _ := b.Leader(t.Context())
		t.Fatalf("the other candidate could not lead within 20s after a cancelled campaign: %v (leader %+v)", err, info)
	}
	assert.NoError(t, tb.Err(), "the new leader's term")
	assert.NoError(t, tb.Resign(t.Context()))
	_, _ = slow.Close(), fast.Close()
	// The proxy's two pipes per connection close with the Lockers' connections.
	if g := settleGoroutines(base); g > base {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after both Lockers closed, %d before:\n%s", g, base, buf[:runtime.Stack(buf, true)])
	}
}

// TestLeadCancelledDuringResign: fn returns while leading and the resign's
// request is slow on its way (delayed 300ms); ctx ends meanwhile. The
// resign must still reach the backend (it runs detached from ctx, bounded):
// when Lead returns, nobody leads.
func TestLeadCancelledDuringResign(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	p, err := netfault.Listen(srv.Addr())
	require.NoError(t, err)
	defer p.Close()
	l := open(t, "redis://"+p.Addr()+"/0")
	e := election(t, l, "leader", "host-a", distlock.WithTermOptions(distlock.WithTTL(time.Minute)))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	err = e.Lead(ctx, func(context.Context, *distlock.Term) error {
		p.DelayRequests(300 * time.Millisecond)
		time.AfterFunc(100*time.Millisecond, cancel) // while the resign is on its way
		return nil
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Lead: %v, want nil or context.Canceled", err)
	}
	p.DelayRequests(0)
	if info, err := open(t, "redis://"+srv.Addr()+"/0").Inspect(t.Context(), e.Key()); err != nil || info.Held {
		t.Errorf("after Lead returned: %+v, %v; want the term resigned", info, err)
	}
}
