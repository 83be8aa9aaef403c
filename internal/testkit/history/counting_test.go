package history

import "testing"

func TestCheckCounting(t *testing.T) {
	// Three holders of a 2-permit semaphore: two overlap (fine), the third
	// starts while both are held (a violation).
	evs := join(
		acq("a", 0, "o1", 1, 0, 10, 100),
		acq("b", 0, "o2", 2, 5, 20, 100),
		acq("c", 0, "o3", 3, 30, 40, 60),
		acq("d", 0, "o4", 4, 150, 160, 170),
	)
	holds := Holds(evs, 1000)
	if got := rules(CheckCounting(holds, 2)); got != "permits" {
		t.Fatalf("2 permits: %q, want one permits violation", got)
	}
	if got := rules(CheckCounting(holds, 3)); got != "" {
		t.Fatalf("3 permits: %q, want none", got)
	}
	// A permit granted after another returned, with a smaller token.
	evs = join(acq("a", 0, "o1", 5, 0, 10, 20), acq("b", 0, "o2", 3, 30, 40, 50))
	if got := rules(CheckCounting(Holds(evs, 1000), 2)); got != "fencing" {
		t.Fatalf("decreasing tokens: %q, want fencing", got)
	}
}
