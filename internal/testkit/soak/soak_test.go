package soak

import "testing"

func TestOnlySkipsUnlessEnabled(t *testing.T) {
	t.Setenv(Env, "")
	ran := false
	t.Run("off", func(t *testing.T) { Only(t, "x"); ran = true })
	if ran {
		t.Errorf("Only let a soak test run with %s unset", Env)
	}
	t.Setenv(Env, "1")
	t.Run("on", func(t *testing.T) { Only(t, "x"); ran = true })
	if !ran {
		t.Errorf("Only skipped a soak test with %s=1", Env)
	}
}
