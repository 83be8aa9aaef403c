package election_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
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
	if err != nil {
		t.Fatalf("Campaign with a minimum hold among the term options: %v", err)
	}
	if err := term.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	if info, err := e.Leader(t.Context()); err != nil || !info.Held {
		t.Errorf("right after Resign within the minimum hold: %+v, %v; want still held", info, err)
	}
}
