package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConformanceChecksConnectionFirst: against a server it cannot reach,
// or that refuses its password, conformance says so in one line and exits
// with the unavailable status, before running any check (it used to report
// every check as a contract violation, exit 1).
func TestConformanceChecksConnectionFirst(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	require.NoError(t, admin.ConfigSet(context.Background(), "requirepass", "right-password").Err())
	for _, tc := range []struct {
		url, want string
		status    int
	}{
		{"redis://127.0.0.1:1/0", "connection refused", ExitUnavailable},
		{"redis://:wrong-password@" + srv.Addr() + "/0", "WRONGPASS", ExitAuth},
		{"redis://" + srv.Addr() + "/0", "NOAUTH", ExitAuth},
	} {
		r := runBin(t, 2*time.Minute, nil, "conformance", "--backend", tc.url, "--run", "^(keys|mutual-exclusion)$")
		if r.status != tc.status || !strings.Contains(r.stderr, tc.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("conformance against %s: status %d, stderr %q; want %d and one line with %q", tc.url, r.status, r.stderr, tc.status, tc.want)
		}
		if strings.Contains(r.stdout, "violated") || strings.Contains(r.stdout, "=== ") {
			t.Errorf("conformance against %s ran checks: %s", tc.url, r.stdout)
		}
		assert.NotContains(t, r.stderr, "wrong-password", "password shown: %s", r.stderr)
	}
}

// TestConformanceRunMatchingNothing: a --run that selects no check is a
// usage error naming the checks (it used to pass with an empty table).
func TestConformanceRunMatchingNothing(t *testing.T) {
	r := runBin(t, time.Minute, nil, "conformance", "--run", "^no-such-check$")
	if r.status != ExitUsage || !strings.Contains(r.stderr, "matches no check") || !strings.Contains(r.stderr, "mutual-exclusion") {
		t.Errorf("status %d, stderr %q; want %d naming the checks", r.status, r.stderr, ExitUsage)
	}
}

// TestConformanceJSON: snake_case names, durations as strings.
func TestConformanceJSON(t *testing.T) {
	r := runBin(t, 2*time.Minute, nil, "conformance", "--json", "--run", "^keys$")
	var rep map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	res, _ := rep["results"].([]any)
	require.Len(t, res, 1, "results %v", rep["results"])
	one, _ := res[0].(map[string]any)
	for _, k := range []string{"name", "contract", "status", "duration"} {
		if _, ok := one[k]; !ok {
			t.Errorf("result lacks %q: %v", k, one)
		}
	}
	if d, ok := one["duration"].(string); !ok {
		t.Errorf("duration %v is not a string", one["duration"])
	} else if _, err := time.ParseDuration(d); err != nil {
		t.Errorf("duration %q: %v", d, err)
	}
}

// TestPrintResultsShowsWhy: the table is followed by each failed or
// unavailable check's whole message, on one line (demo --local and
// conformance used to end with rc=1 and a truncated table cell).
func TestPrintResultsShowsWhy(t *testing.T) {
	long := strings.Repeat("x", 300)
	var b bytes.Buffer
	printResults(&b, []conformance.Result{
		{Name: "mutual-exclusion", Status: conformance.Fail, Message: "contract violated: 2 overlapping\n" + long + " END"},
		{Name: "ttl", Status: conformance.Unavailable, Message: "backend unavailable during the check: WRONGPASS"},
		{Name: "keys", Status: conformance.Pass},
	})
	out := b.String()
	for _, want := range []string{"FAIL mutual-exclusion: contract violated: 2 overlapping | " + long + " END", "UNAVAILABLE ttl: backend unavailable during the check: WRONGPASS", "1 passed, 1 failed, 1 unavailable, 0 skipped"} {
		assert.Contains(t, out, want, "output lacks %q:\n%s", want, out)
	}
	assert.Equal(t, ExitUnavailable, statusOf([]conformance.Result{{Status: conformance.Pass}, {Status: conformance.Unavailable}}), "statusOf(pass, unavailable)")
}

// TestConformanceInterrupted: Ctrl-C while a check runs ends the run with
// "interrupted", exit 130, the check in flight reported as interrupted and
// the rest as not run, no check FAIL (it printed "refresh-extends FAIL
// contract … violated: … context canceled: interrupt signal received",
// exit 1).
func TestConformanceInterrupted(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(bin, "conformance", "--run", "^(refresh-extends|keys)$", "--ttl", "5s")
	cmd.Env = append(os.Environ(), "DISTLOCK_BACKEND=")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	require.NoError(t, cmd.Start())
	timer := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	var stdout strings.Builder
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		stdout.WriteString(sc.Text() + "\n")
		if sc.Text() == "=== refresh-extends" {
			_ = cmd.Process.Signal(os.Interrupt) // the check is in flight
			break
		}
	}
	rest, _ := io.ReadAll(out)
	stdout.Write(rest)
	st := exitStatus(cmd.Wait())
	so := stdout.String()
	if st != ExitInterrupted || !strings.Contains(errb.String(), "interrupted") || strings.Contains(so, "FAIL") ||
		!strings.Contains(so, "--- INTERRUPTED refresh-extends") || !regexp.MustCompile(`keys\s+not run`).MatchString(so) {
		t.Errorf("status %d; stdout:\n%s\nstderr: %s\nwant %d, refresh-extends interrupted, keys not run, no FAIL", st, so, errb.String(), ExitInterrupted)
	}
}

// TestConformanceSummary: a run ends with what it verified, what cannot be
// verified from outside in a user's words (no harness jargon such as
// Faults.NewLinkedLocker), what a flag left out, and, on a Redis without
// persistence, a warning that fencing tokens restart at 1 after a restart
// (such a Redis passed every check without a word).
func TestConformanceSummary(t *testing.T) {
	t.Parallel()
	url, _ := redisURL(t)
	r := runBin(t, 2*time.Minute, nil, "conformance", "--backend", url, "--run", "^(keys|late-grant|partitioned-holder)$")
	for _, want := range []string{"summary: 1 of 3 checks verified; 2 not verifiable from outside", "only the test harness", "warning: appendonly is off", "fencing tokens restart at 1"} {
		assert.Contains(t, r.stdout, want, "stdout lacks %q:\n%s", want, r.stdout)
	}
	if strings.Contains(r.stdout, "Faults.") || r.status != ExitOK {
		t.Errorf("status %d, stdout shows harness jargon or the run failed:\n%s\n%s", r.status, r.stdout, r.stderr)
	}
}

// TestConformanceFencedFlagsCheckedFirst: --fenced-redis takes a URL with a
// password; a wrong or missing one is the credentials error (77) before any
// check runs, without the password in the message (it was "dial tcp:
// address redis://:pw@…: too many colons", the password shown, or a
// contract FAIL some seconds into the run).
func TestConformanceFencedFlagsCheckedFirst(t *testing.T) {
	t.Parallel()
	srv := authRedis(t)
	for _, tc := range []struct {
		fenced string
		status int
	}{
		{"redis://:wrong-password@" + srv.Addr() + "/0", ExitAuth},
		{srv.Addr(), ExitAuth},
		{"redis://:right-password@" + srv.Addr() + "/0", ExitOK},
	} {
		r := runBin(t, 2*time.Minute, nil, "conformance", "--run", "^keys$", "--fenced-redis", tc.fenced)
		if r.status != tc.status || strings.Contains(r.stderr+r.stdout, "password@") || strings.Contains(r.stdout, "FAIL") {
			t.Errorf("--fenced-redis %s: status %d, stdout %q, stderr %q; want %d, no password shown", backendRedact(tc.fenced), r.status, r.stdout, r.stderr, tc.status)
		}
		if tc.status != ExitOK && strings.Contains(r.stdout, "=== ") {
			t.Errorf("--fenced-redis %s: checks ran before the resource was checked: %s", backendRedact(tc.fenced), r.stdout)
		}
	}
}

func backendRedact(s string) string { return redactURL(s) }
