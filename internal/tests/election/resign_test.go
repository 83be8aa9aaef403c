package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/assert"
)

// TestLeadFnResignsAndFails: fn steps down on a fatal error of its own
// (Term.Resign, then return the error), a natural pattern. The term was
// given up, not lost: Lead must return fn's error, as when fn returns
// while still leading, not drop it and campaign again (which ran fn over
// and over, the error never seen).
func TestLeadFnResignsAndFails(t *testing.T) {
	l := open(t, "mem://lead-resigns")
	e := election(t, l, "leader", "host-a", distlock.WithRecampaignBackoff(distlock.Backoff{Min: time.Millisecond, Max: time.Millisecond}))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	fatal := errors.New("fatal: config broken")
	calls := 0
	err := e.Lead(ctx, func(tctx context.Context, term *distlock.Term) error {
		calls++
		assert.NoError(t, term.Resign(tctx), "Resign")
		return fatal
	})
	if !errors.Is(err, fatal) || calls != 1 {
		t.Errorf("Lead: %v after %d calls of fn; want fn's error after one call", err, calls)
	}
}
