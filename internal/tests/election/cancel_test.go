package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLeadWithEndedCtxNeverLeads: Lead with a ctx that has already ended
// must return ctx's error without running fn: fn would start as leader (the
// term is valid) of a candidate that was told to stop, and act on it.
func TestLeadWithEndedCtxNeverLeads(t *testing.T) {
	for _, b := range candidateBackends[:2] {
		t.Run(b.name, func(t *testing.T) {
			l := open(t, b.url(t))
			e := election(t, l, "leader", "host-a")
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			ran := false
			err := e.Lead(ctx, func(context.Context, *distlock.Term) error { ran = true; return nil })
			if !errors.Is(err, context.Canceled) || ran {
				t.Errorf("Lead with a cancelled ctx: %v, fn ran %v; want context.Canceled and fn not run", err, ran)
			}
			if info, err := e.Leader(t.Context()); err != nil || info.Held {
				t.Errorf("after Lead with a cancelled ctx: %+v, %v; want nobody leading", info, err)
			}
		})
	}
}

// TestLeadCancelledDuringFnResigns: the outer ctx ends while fn runs; Lead
// returns ctx's error and the term is resigned before it returns (another
// candidate can campaign at once, not after the TTL).
func TestLeadCancelledDuringFnResigns(t *testing.T) {
	l := open(t, redisURL(t))
	e := election(t, l, "leader", "host-a", distlock.WithTermOptions(distlock.WithTTL(time.Minute)))
	ctx, cancel := context.WithCancel(t.Context())
	err := e.Lead(ctx, func(tctx context.Context, _ *distlock.Term) error {
		cancel()
		<-tctx.Done()
		return tctx.Err()
	})
	assert.ErrorIs(t, err, context.Canceled, "Lead")
	if info, err := e.Leader(t.Context()); err != nil || info.Held {
		t.Errorf("after Lead returned: %+v, %v; want the term resigned", info, err)
	}
}

// TestLeadCancelledDuringBackoff: the backend is down, so Lead waits out
// its recampaign backoff (an hour here); ctx ending must end that wait.
func TestLeadCancelledDuringBackoff(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	l := open(t, "redis://"+srv.Addr()+"/0")
	e := election(t, l, "leader", "host-a", distlock.WithRecampaignBackoff(distlock.Backoff{Min: time.Hour, Max: time.Hour}))
	require.NoError(t, srv.Kill())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- e.Lead(ctx, func(context.Context, *distlock.Term) error { return errors.New("led with the backend down") })
	}()
	time.Sleep(200 * time.Millisecond) // in the backoff by now
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled, "Lead")
	case <-time.After(30 * time.Second):
		t.Fatal("Lead still waiting out its backoff 30s after ctx ended")
	}
}

// cancelAtGrant is an Observer that ends a ctx the moment an acquisition
// succeeds: the caller's ctx ending while the grant is on its way back.
type cancelAtGrant struct {
	distlock.NopObserver
	cancel context.CancelFunc
}

func (c cancelAtGrant) AcquireEnd(_ context.Context, r distlock.AcquireResult) {
	if r.Err == nil {
		c.cancel()
	}
}

// TestLeadCtxEndsAtGrantNeverRunsFn: Lead's ctx ends just as the campaign
// wins. Lead must resign and return ctx's error without starting fn: a
// candidate told to stop does not begin leading (gocronlock's Elector
// would report it leader, and gocron run a job, after its ctx ended).
func TestLeadCtxEndsAtGrantNeverRunsFn(t *testing.T) {
	l := open(t, "mem://lead-ctx-at-grant")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	e := election(t, l, "leader", "host-a", distlock.WithTermOptions(distlock.WithObserver(cancelAtGrant{cancel: cancel})))
	ran := false
	err := e.Lead(ctx, func(context.Context, *distlock.Term) error { ran = true; return nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Errorf("Lead whose ctx ended at the grant: %v, fn ran %v; want context.Canceled and fn not run", err, ran)
	}
	if info, err := e.Leader(t.Context()); err != nil || info.Held {
		t.Errorf("after Lead returned: %+v, %v; want the term resigned", info, err)
	}
}
