package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestLeadFnPanicResigns: fn panics and the caller recovers (a supervisor,
// a framework that turns panics into errors). The term must not stay
// behind, refreshed for ever by a candidate that no longer runs fn:
// another candidate leads at once, not never.
func TestLeadFnPanicResigns(t *testing.T) {
	l := open(t, redisURL(t))
	a := election(t, l, "leader", "a", distlock.WithTermOptions(distlock.WithTTL(3*time.Second)))
	b := election(t, l, "leader", "b")
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Lead did not pass fn's panic on")
			}
		}()
		_ = a.Lead(t.Context(), func(context.Context, *distlock.Term) error { panic("leader bug") })
	}()
	// Longer than several TTLs: an auto-refreshed orphan term would still
	// hold the key.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	term, err := b.Campaign(ctx)
	if err != nil {
		info, _ := b.Leader(t.Context())
		t.Fatalf("after a leader's fn panicked: %v; leader %+v", err, info)
	}
	_ = term.Resign(t.Context())
}
