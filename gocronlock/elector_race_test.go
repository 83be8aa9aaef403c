package gocronlock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock/gocronlock"
)

// TestElectorIsLeaderAfterTermEnd: terms end again and again (an
// operator's ForceRelease, which mem:// tells the holder at once); each
// time, once the other Elector says it leads, the deposed one must say it
// does not: IsLeader must not answer from a term that has ended.
func TestElectorIsLeaderAfterTermEnd(t *testing.T) {
	const ns = "mem://elector-race"
	els := []*gocronlock.Elector{memElector(t, "elector-race"), memElector(t, "elector-race")}
	for _, el := range els {
		el.Start(t.Context())
	}
	probe := open(t, ns)
	for round := range 200 {
		awaitLeader(t, els)
		old, err := probe.ForceRelease(t.Context(), "scheduler")
		if err != nil || !old.Held {
			t.Fatalf("round %d: ForceRelease: %+v, %v", round, old, err)
		}
		// Wait for the next term (either candidate may win it); no
		// other term change follows until the next ForceRelease.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
			info, err := probe.Inspect(t.Context(), "scheduler")
			if err != nil {
				t.Fatal(err)
			}
			if info.Held && info.Token > old.Token {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no new term 30s after ForceRelease", round)
			}
		}
		if els[0].IsLeader(t.Context()) == nil && els[1].IsLeader(t.Context()) == nil {
			t.Fatalf("round %d: both Electors lead after the term ended", round)
		}
	}
}
