package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bin is the distlock binary built once for the tests that run it.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "distlock-cli")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "distlock")
	build := exec.Command("go", "build", "-race", "-o", bin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		// Without cgo there is no race detector; build plainly.
		build = exec.Command("go", "build", "-o", bin, ".")
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			panic(err)
		}
	}
	// The race runtime sleeps 1s at exit (GORACE atexit_sleep_ms) so that
	// late goroutines can report: a second per run of the binary, most of
	// this package's time. 50ms keeps the report window for goroutines that
	// are still running then.
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=50")
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	status         int
}

// runBin runs the binary with args and a timeout.
func runBin(t *testing.T, timeout time.Duration, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	// The caller's $DISTLOCK_BACKEND is not the test's: unset unless env sets it.
	cmd.Env = append(append(os.Environ(), "DISTLOCK_BACKEND="), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(timeout, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Wait()
	return result{out.String(), errb.String(), exitStatus(err)}
}

func TestRunStatusAndEnvironment(t *testing.T) {
	url, _ := redisURL(t)
	env := []string{"DISTLOCK_BACKEND=" + url}
	r := runBin(t, time.Minute, env, "run", "--key", "job/1", "--", "sh", "-c", `echo "$DISTLOCK_KEY|$DISTLOCK_TOKEN|$DISTLOCK_OWNER"; exit 7`)
	if r.status != 7 {
		t.Fatalf("status %d, want the command's 7; stderr: %s", r.status, r.stderr)
	}
	parts := strings.Split(strings.TrimSpace(r.stdout), "|")
	if len(parts) != 3 || parts[0] != "job/1" || parts[1] != "1" || len(parts[2]) < 16 {
		t.Errorf("environment seen by the command: %q", r.stdout)
	}
	r = runBin(t, time.Minute, env, "run", "--key", "k", "--owner", "me", "--", "sh", "-c", `echo $DISTLOCK_OWNER; kill -9 $$`)
	if r.status != 128+9 || strings.TrimSpace(r.stdout) != "me" {
		t.Errorf("command killed by SIGKILL: status %d (want 137), stdout %q", r.status, r.stdout)
	}
	r = runBin(t, time.Minute, env, "run", "--key", "k", "--", "/nonexistent/cmd")
	assert.Equal(t, 127, r.status, "missing command: status")
}

func TestUsageErrors(t *testing.T) {
	url, _ := redisURL(t)
	for _, tc := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{}, ExitUsage, "Usage"},
		{[]string{"frobnicate"}, ExitUsage, `unknown command "frobnicate"`},
		{[]string{"run", "--", "true"}, ExitUsage, "--key is required"},
		{[]string{"run", "--key", "k"}, ExitUsage, "no command given"},
		{[]string{"run", "--bogus", "--key", "k", "--", "true"}, ExitUsage, "flag provided but not defined: -bogus"},
		{[]string{"run", "--key", "k", "--wait", "1s", "--no-wait", "--", "true"}, ExitUsage, "exclude each other"},
		{[]string{"run", "--backend", "nosuch://x", "--key", "k", "--", "true"}, ExitConfig, `unknown backend scheme "nosuch"`},
		{[]string{"run", "--backend", "redis://127.0.0.1:1/0?x=1", "--key", "k", "--", "true"}, ExitConfig, "unexpected option: x"},
		{[]string{"run", "--key", "", "--", "true"}, ExitUsage, "--key is required"},
		{[]string{"run", "--backend", url, "--key", strings.Repeat("k", 1025), "--", "true"}, ExitConfig, "invalid lock key"},
		{[]string{"run", "--backend", url, "--key", "k", "--ttl", "-1s", "--", "true"}, ExitConfig, "invalid lock TTL"},
		{[]string{"run", "--backend", url, "--key", "k", "--owner", strings.Repeat("o", 300), "--", "true"}, ExitConfig, "owner id"},
		{[]string{"conformance", "--run", "("}, ExitUsage, "--run"},
		{[]string{"bench", "--clients", "0"}, ExitUsage, "must be positive"},
	} {
		r := runBin(t, time.Minute, nil, tc.args...)
		if r.status != tc.status || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("distlock %q: status %d stderr %q; want %d and %q", tc.args, r.status, r.stderr, tc.status, tc.want)
		}
		if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic") {
			t.Errorf("distlock %q printed a stack trace: %s", tc.args, r.stderr)
		}
		if tc.status != ExitUsage || len(tc.args) < 2 {
			continue
		}
		if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n > 0 {
			t.Errorf("distlock %q: %d lines of error, want one: %q", tc.args, n+1, r.stderr)
		}
	}
}

// TestHelp: help goes to stdout, for "distlock help", "distlock help CMD"
// and "distlock CMD --help" alike; each flag's default is printed once;
// --version prints a version.
func TestHelp(t *testing.T) {
	for _, cmd := range []string{"run", "conformance", "bench", "demo"} {
		for _, args := range [][]string{{cmd, "--help"}, {cmd, "-h"}, {"help", cmd}} {
			r := runBin(t, time.Minute, nil, args...)
			if r.status != 0 || !strings.Contains(r.stdout, "Usage: distlock "+cmd) || r.stderr != "" {
				t.Errorf("distlock %q: status %d, stdout %q, stderr %q; want the usage on stdout", args, r.status, r.stdout, r.stderr)
			}
			for _, line := range strings.Split(r.stdout, "\n") {
				if strings.Count(line, "(default") > 1 {
					t.Errorf("distlock %q: default printed twice: %q", args, line)
				}
			}
		}
	}
	r := runBin(t, time.Minute, nil, "help")
	if r.status != 0 || !strings.Contains(r.stdout, "distlock run --backend URL") {
		t.Errorf("distlock help: status %d, stdout %q", r.status, r.stdout)
	}
	r = runBin(t, time.Minute, nil, "--version")
	if r.status != 0 || !strings.HasPrefix(r.stdout, "distlock ") || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("distlock --version: status %d, stdout %q", r.status, r.stdout)
	}
}

func TestRunForwardsSignals(t *testing.T) {
	url, _ := redisURL(t)
	cmd := exec.Command(bin, "run", "--backend", url, "--key", "sig", "--", "sh", "-c", `trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.05; done`)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("command did not start: %q %v", buf, err)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	rest := make([]byte, 64)
	n, _ := out.Read(rest)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if st := exitStatus(err); st != 3 || !strings.Contains(string(rest[:n]), "got TERM") {
			t.Errorf("after SIGTERM to distlock: status %d, output %q; want the command to get TERM and exit 3", st, rest[:n])
		}
	case <-time.After(30 * time.Second):
		t.Fatal("distlock did not exit after SIGTERM")
	}
}

func TestConformanceCommandOnMemory(t *testing.T) {
	t.Parallel()
	r := runBin(t, 5*time.Minute, nil, "conformance")
	if r.status != 0 {
		t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", r.status, r.stdout, r.stderr)
	}
	for _, want := range []string{"=== mutual-exclusion", "--- PASS mutual-exclusion", "CHECK", "RESULT", "DURATION", "destructive: run with --destructive", "0 failed"} {
		assert.Contains(t, r.stdout, want, "output lacks %q:\n%s", want, r.stdout)
	}
	r = runBin(t, 5*time.Minute, []string{"DISTLOCK_BACKEND=mem://other"}, "conformance", "--json", "--run", "^(keys|ttl|fair)$")
	var rep struct {
		Backend string
		Results []struct{ Name, Status string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, r.stdout)
	}
	if rep.Backend != "mem://other" || len(rep.Results) != 3 {
		t.Errorf("report %+v", rep)
	}
	for _, res := range rep.Results {
		assert.Equal(t, "pass", res.Status, "%s", res.Name)
	}
}

func TestBenchCommand(t *testing.T) {
	r := runBin(t, time.Minute, nil, "bench", "--duration", "300ms", "--clients", "8", "--json")
	if r.status != 0 {
		t.Fatalf("status %d: %s", r.status, r.stderr)
	}
	var rep BenchReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, r.stdout)
	}
	if rep.Uncontended.Cycles == 0 || rep.Uncontended.AcquireP50us <= 0 || rep.Contended.Handoffs == 0 ||
		rep.Contended.HandoffP99us < rep.Contended.HandoffP50us || rep.Contended.Clients != 8 || rep.Contended.Errors != 0 {
		t.Errorf("implausible report %+v", rep)
	}
	for _, want := range []string{"distlock bench: uncontended: 1 client", "distlock bench: contended: 8 clients", "handoffs"} {
		assert.Contains(t, r.stderr, want, "bench progress on stderr lacks %q: %q", want, r.stderr)
	}
	r = runBin(t, time.Minute, nil, "bench", "--duration", "200ms")
	for _, want := range []string{"uncontended cycles/s", "contended handoff p50 / p99"} {
		assert.Contains(t, r.stdout, want, "table lacks %q:\n%s", want, r.stdout)
	}
}

func TestExitStatus(t *testing.T) {
	if exitStatus(nil) != 0 || exitStatus(errors.New("x")) != ExitInternal {
		t.Error("exitStatus")
	}
}

// A command that never ran keeps no minimum hold: with --min-hold 1h, a
// run whose command cannot start leaves the lock free at once (it stayed
// taken for the hour).
func TestMinHoldNotKeptWhenCommandNeverRan(t *testing.T) {
	url, _ := redisURL(t)
	env := []string{"DISTLOCK_BACKEND=" + url}
	if r := runBin(t, time.Minute, env, "run", "--key", "never-ran", "--min-hold", "1h", "--", "/nonexistent/cmd"); r.status != 127 {
		t.Fatalf("missing command: status %d, want 127; stderr: %s", r.status, r.stderr)
	}
	if r := runBin(t, time.Minute, env, "run", "--key", "never-ran", "--no-wait", "--", "true"); r.status != 0 {
		t.Errorf("the lock of a command that never ran is still taken: status %d; stderr: %s", r.status, r.stderr)
	}
}
