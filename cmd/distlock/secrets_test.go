package main

import (
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/tests/openfuzz"
)

// TestCLIHidesPassword: malformed and unreachable URLs carrying a marker
// password, given with --backend or in $DISTLOCK_BACKEND, to every
// subcommand and to --help: the marker appears in no output. (Open's
// errors printed the raw URL, and every --help printed $DISTLOCK_BACKEND
// as the flag's default.)
func TestCLIHidesPassword(t *testing.T) {
	t.Parallel()
	urls := append([]string{
		"redis://:" + openfuzz.Marker + "@127.0.0.1:1/0",
		"redlock://:" + openfuzz.Marker + "@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/0",
	}, openfuzz.MalformedURLs...)
	check := func(what string, r result) {
		t.Helper()
		if openfuzz.Leaks(r.stdout) || openfuzz.Leaks(r.stderr) {
			t.Errorf("%s shows the password:\nstdout %q\nstderr %q", what, r.stdout, r.stderr)
		}
	}
	flagRuns := [][]string{
		{"run", "--key", "k", "--wait", "1s", "--", "true"},
		{"conformance", "--run", "^keys$", "--json"},
		{"bench", "--duration", "10ms", "--json"},
	}
	envRuns := [][]string{
		{"run", "--key", "k", "--no-wait", "--", "true"},
		{"conformance", "--run", "^keys$"},
		{"bench", "--duration", "10ms"},
	}
	// Each URL goes to one subcommand by flag and another by the
	// environment (all of them would take minutes); the first few also to
	// every --help.
	for i, u := range urls {
		args := append([]string{flagRuns[i%3][0], "--backend", u}, flagRuns[i%3][1:]...)
		check("distlock "+strings.Join(args, " "), runBin(t, time.Minute, nil, args...))
		env := []string{"DISTLOCK_BACKEND=" + u}
		runs := [][]string{envRuns[(i+1)%3]}
		if i < 4 {
			runs = append(runs, []string{"run", "--help"}, []string{"conformance", "--help"}, []string{"help", "bench"})
		}
		for _, args := range runs {
			check("$DISTLOCK_BACKEND="+u+" distlock "+strings.Join(args, " "), runBin(t, time.Minute, env, args...))
		}
	}
}
