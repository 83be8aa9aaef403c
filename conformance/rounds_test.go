package conformance

import "testing"

func TestRoundsScalesLoadChecks(t *testing.T) {
	for _, c := range []struct {
		env  string
		n    int
		want int
	}{
		{"", 2000, 2000}, {"0.25", 2000, 500}, {"4", 250, 1000}, {"0.001", 100, 5},
		{"1e9", 10, 1000}, {"-1", 50, 50}, {"NaN", 50, 50}, {"x", 50, 50}, {"0.25", 1, 1},
	} {
		t.Setenv(RoundsEnv, c.env)
		if got := rounds(c.n); got != c.want {
			t.Errorf("%s=%q: rounds(%d) = %d, want %d", RoundsEnv, c.env, c.n, got, c.want)
		}
	}
}
