package main

import (
	"strings"
	"testing"
	"time"
)

// TestRunRefusesInProcessBackend: without --backend and $DISTLOCK_BACKEND,
// or with mem://, run refuses in one line that names both, and never runs
// the command (it used to fall back to mem://, which excludes nothing
// across processes).
func TestRunRefusesInProcessBackend(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env    []string
		args   []string
		status int
	}{
		{nil, nil, ExitUsage},
		{[]string{"DISTLOCK_BACKEND=mem://"}, nil, ExitConfig},
		{nil, []string{"--backend", "mem://nightly"}, ExitConfig},
		{[]string{"DISTLOCK_BACKEND=redis://127.0.0.1:1/0"}, []string{"--backend", "MEM://"}, ExitConfig},
	} {
		args := append(append([]string{"run"}, tc.args...), "--key", "nightly", "--no-wait", "--", "echo", "ran")
		r := runBin(t, time.Minute, tc.env, args...)
		if r.status != tc.status || strings.Contains(r.stdout, "ran") {
			t.Errorf("env %q, distlock %q: status %d, stdout %q; want %d and the command not run", tc.env, args, r.status, r.stdout, tc.status)
		}
		if !strings.Contains(r.stderr, "--backend") || !strings.Contains(r.stderr, "$DISTLOCK_BACKEND") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("env %q, distlock %q: stderr %q; want one line naming --backend and $DISTLOCK_BACKEND", tc.env, args, r.stderr)
		}
	}
	// The demo keeps the in-process backend.
	if r := runBin(t, 5*time.Minute, nil, "demo"); r.status != 0 || !strings.Contains(r.stdout, "mem://") {
		t.Errorf("demo: status %d, stdout %q, stderr %q", r.status, r.stdout, r.stderr)
	}
}
