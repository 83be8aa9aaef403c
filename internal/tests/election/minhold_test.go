package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/require"
)

// TestElectionWithMinHoldTermOption: WithTermOptions(WithMinHold(d)) is
// what Term.Resign's doc invites ("a WithMinHold among the term options
// keeps it taken until the minimum hold ends"), but Campaign gives every
// term WithOwner(fresh id), and an Expiring backend without
// DelayedReleaser refuses WithMinHold with WithOwner: on redis every
// campaign failed with ErrInvalidOption, and Lead returned it at once.
func TestElectionWithMinHoldTermOption(t *testing.T) {
	l := open(t, redisURL(t))
	e := election(t, l, "leader", "host-a", distlock.WithTermOptions(distlock.WithMinHold(time.Second)))
	term, err := e.Campaign(t.Context())
	require.NoError(t, err, "Campaign with a minimum hold among the term options")
	require.NoError(t, term.Resign(t.Context()))
	if info, err := e.Leader(t.Context()); err != nil || !info.Held {
		t.Errorf("right after Resign within the minimum hold: %+v, %v; want still held", info, err)
	}
}

// cancelOnGrant is an Observer that ends a Lead's ctx the moment its
// campaign wins: after the grant, before Lead can look at ctx.
type cancelOnGrant struct {
	distlock.NopObserver
	cancel context.CancelFunc
}

func (o cancelOnGrant) AcquireEnd(_ context.Context, r distlock.AcquireResult) {
	if r.Err == nil {
		o.cancel()
	}
}

// TestLeadEndedAtGrantKeepsNoMinHold: Lead's ctx ends the moment its
// campaign wins, with WithMinHold(time.Minute) among the term options. fn
// does not run (the candidate never led), so the term must be given back at
// once: the deferred release went through the minimum-hold path and locked
// every other candidate out for the minute.
func TestLeadEndedAtGrantKeepsNoMinHold(t *testing.T) {
	l := open(t, memURL(t))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	e := election(t, l, "leader", "host-a", distlock.WithTermOptions(
		distlock.WithMinHold(time.Minute), distlock.WithObserver(cancelOnGrant{cancel: cancel})))
	ran := false
	err := e.Lead(ctx, func(context.Context, *distlock.Term) error { ran = true; return nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Lead whose ctx ended at the grant: %v, fn ran %v; want context.Canceled, fn not run", err, ran)
	}
	if info, err := e.Leader(t.Context()); err != nil || info.Held {
		t.Errorf("after a term given up before fn ran: %+v, %v; want nobody leading (no minimum hold kept)", info, err)
	}
}

// TestLeadMinHoldKeptAfterFnRan: the counterpart: a term whose fn ran keeps
// its minimum hold after Lead resigns it.
func TestLeadMinHoldKeptAfterFnRan(t *testing.T) {
	l := open(t, memURL(t))
	e := election(t, l, "leader", "host-a", distlock.WithTermOptions(distlock.WithMinHold(time.Minute)))
	require.NoError(t, e.Lead(t.Context(), func(context.Context, *distlock.Term) error { return nil }))
	if info, err := e.Leader(t.Context()); err != nil || !info.Held {
		t.Errorf("after fn ran and returned within the minimum hold: %+v, %v; want still held", info, err)
	}
}
