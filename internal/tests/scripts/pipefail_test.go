// Package scripts checks the shell scripts that make ci runs on a fresh
// machine for mistakes that only show up some of the time.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// earlyExit matches a pipe into a reader that may exit before its writer is
// done: under pipefail the writer's SIGPIPE fails the script (exit 141)
// whenever the reader wins the race.
var earlyExit = regexp.MustCompile(`\|\s*(head|grep -q|grep -m)\b`)

// TestNoEarlyExitUnderPipefail: install-deps.sh once ended make ci with
// "Error 141" from `etcd --version | head -n 1` (2 runs in 200 here).
func TestNoEarlyExitUnderPipefail(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	files, err := filepath.Glob(filepath.Join(root, "scripts", "*.sh"))
	require.NoError(t, err)
	files = append(files, filepath.Join(root, ".ci", "run"))
	if len(files) < 2 {
		t.Fatalf("found %d scripts; the glob is wrong", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		src := string(b)
		if !strings.Contains(src, "pipefail") {
			continue
		}
		for i, line := range strings.Split(src, "\n") {
			code, _, _ := strings.Cut(line, "#")
			assert.False(t, earlyExit.MatchString(code), "%s:%d: %q: the reader may exit first and pipefail turns the writer's SIGPIPE into a failure; read the whole input (sed -n 1p, grep -c)", f, i+1, strings.TrimSpace(line))
		}
	}
}

// TestTestPackagesIsOneLineOfEveryPackage: make ci hands the list to
// scripts/run-all.sh inside a command string that bash -c runs; a list
// with newlines ran go test on the first package only and then tried to
// run each other package's path as a command.
func TestTestPackagesIsOneLineOfEveryPackage(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	sh := exec.Command("bash", filepath.Join("scripts", "test-packages.sh"))
	sh.Dir = root
	out, err := sh.Output()
	require.NoError(t, err, "test-packages.sh")
	list := strings.TrimSuffix(string(out), "\n")
	require.NotContains(t, list, "\n", "test-packages.sh printed %d lines, want one", strings.Count(list, "\n")+1)
	cmd := exec.Command("go", "list", "./...")
	cmd.Dir = root
	all, err := cmd.Output()
	require.NoError(t, err, "go list")
	got := strings.Fields(list)
	want := strings.Fields(string(all))
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("test-packages.sh lists %d packages, go list ./... %d: the sets differ", len(got), len(want))
	}
	// make ci tests slow and rest, at once: together they are all, once.
	var parts []string
	for _, which := range []string{"slow", "rest"} {
		sh := exec.Command("bash", filepath.Join("scripts", "test-packages.sh"), which)
		sh.Dir = root
		out, err := sh.Output()
		require.NoError(t, err, "test-packages.sh %s", which)
		require.NotContains(t, strings.TrimSuffix(string(out), "\n"), "\n", "test-packages.sh %s printed more than one line", which)
		parts = append(parts, strings.Fields(string(out))...)
	}
	slices.Sort(parts)
	require.Equal(t, want, parts, "test-packages.sh slow and rest together are not go list ./..., each package once")
}
