package distlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
)

// TestElectionLockerDefaultOwner: NewElection refuses WithOwner among the
// term options ("Each term gets an owner id of its own, so two candidates
// of one identity still exclude each other"), but a Locker whose defaults
// carry WithOwner (memory.WithDefaults, or any backend's defaults, such as
// one owner id per service) gives every term that owner: two candidates
// on two such Lockers both win, reentrantly, and both see Term.Err() ==
// nil at the same instant: two leaders.
func TestElectionLockerDefaultOwner(t *testing.T) {
	ns := memory.NewNamespace()
	defaults := memory.WithDefaults(distlock.WithOwner("billing-service"))
	a, b := memory.MustNew(ns, defaults), memory.MustNew(ns, defaults)
	defer a.Close()
	defer b.Close()
	ea, err := distlock.NewElection(a, "leader", "host-a")
	if err != nil {
		t.Fatal(err)
	}
	eb, err := distlock.NewElection(b, "leader", "host-b")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ta, err := ea.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ta.Resign(ctx)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	tb, err := eb.Campaign(cctx)
	if err != nil {
		return // b waits while a leads: one leader
	}
	defer tb.Resign(ctx)
	if ta.Err() == nil && tb.Err() == nil {
		t.Errorf("two leaders at once: host-a (token %d) and host-b (token %d), both Term.Err() == nil", ta.Token(), tb.Token())
	}
}
